#pragma once
// The files of models/ compiled into the binary, so longctx works from any directory.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace longctx::presets {

// Text of models/<name>.json, or nothing.
std::optional<std::string_view> model(std::string_view name);
// Text of models/hardware/<name>.json, or nothing.
std::optional<std::string_view> hardware(std::string_view name);
std::vector<std::string> model_names();
std::vector<std::string> hardware_names();

}  // namespace longctx::presets
