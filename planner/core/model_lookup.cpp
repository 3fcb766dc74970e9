// load_model (model_config.h): what a --model word names, in order: a file or folder that
// exists, a preset (any case), a Hub id in the local cache (hub_cache.h), a preset's Hub id.
#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/core/hub_cache.h"
#include "planner/core/json_fields.h"
#include "planner/core/model_config.h"
#include "planner/core/presets.h"

namespace longctx {
namespace fs = std::filesystem;

namespace {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

Result<ModelConfig> preset_model(const std::string& preset) {
  LONGCTX_TRY(auto j, json_fields::parse(std::string(*presets::model(preset)), "--model"));
  return model_from_json(j, preset);
}

// The preset whose name (any case) or Hub id (its "_name_or_path", any case) is `word`, or "".
std::string find_preset(const std::string& word) {
  const std::string key = lowercase(word);
  if (presets::model(key)) return key;
  for (const std::string& name : presets::model_names()) {
    const auto j = nlohmann::json::parse(std::string(*presets::model(name)), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("_name_or_path") && j["_name_or_path"].is_string() &&
        lowercase(j["_name_or_path"].get<std::string>()) == key)
      return name;
  }
  return "";
}

// A folder's name need not be UTF-8, a plan file's text must be (dump() would throw): bytes
// that are not UTF-8 become U+FFFD.
std::string utf8(const std::string& s) {
  return nlohmann::json::parse(nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

// A config.json, or a model folder holding one: named after the file, or its folder when the
// file is config.json; the model's source is that folder, absolute.
Result<ModelConfig> model_from_path(const std::string& given, fs::path path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    path = path.lexically_normal();
    if (!path.has_filename()) path = path.parent_path();  // "dir/" -> "dir"
    // Only a missing entry is "no config.json": a FIFO, a device, a folder or a link loop of
    // that name is refused by the reader, which names what it is.
    if (!fs::exists(fs::symlink_status(path / "config.json", ec)))
      return Error::bad_input("--model", fmt::format("the directory '{}' holds no config.json", given));
    path /= "config.json";
  }
  LONGCTX_TRY(auto text, json_fields::read_file(path.string(), "--model"));
  LONGCTX_TRY(auto j, json_fields::parse(text, path.string()));
  const fs::path folder = fs::absolute(path, ec).lexically_normal().parent_path();
  std::string name = path.stem().string();
  if (name == "config" && !folder.filename().empty()) name = folder.filename().string();
  LONGCTX_TRY(ModelConfig m, model_from_json(j, utf8(name)));
  m.source = utf8(folder.string());
  return m;
}

}  // namespace

std::string model_config_file(const std::string& name_or_path) {
  std::error_code ec;
  if (!name_or_path.empty() && fs::exists(fs::symlink_status(name_or_path, ec)))
    return fs::is_directory(name_or_path, ec) ? (fs::path(name_or_path) / "config.json").string() : name_or_path;
  if (presets::model(name_or_path) || !looks_like_hub_id(name_or_path)) return "";
  auto config = find_hub_config(name_or_path);
  return config ? *config : "";
}

Result<ModelConfig> load_model(const std::string& name_or_path) {
  std::error_code ec;
  if (!name_or_path.empty() && fs::exists(fs::symlink_status(name_or_path, ec)))
    return model_from_path(name_or_path, name_or_path);
  if (presets::model(name_or_path)) return preset_model(name_or_path);
  const std::string preset = find_preset(name_or_path);
  if (!preset.empty() && !looks_like_hub_id(name_or_path)) return preset_model(preset);
  if (looks_like_hub_id(name_or_path)) {
    auto config = find_hub_config(name_or_path);
    // A preset's Hub id answers from the preset when the cache lacks it: the same config.json.
    if (!config && !preset.empty()) return preset_model(preset);
    if (!config) return config.error();
    LONGCTX_TRY(ModelConfig m, model_from_path(*config, *config));
    m.name = name_or_path;
    m.source = name_or_path;
    return m;
  }
  return Error::bad_input("--model", fmt::format("'{}' is neither a preset, a Hugging Face Hub id (ORG/NAME) nor a "
                                                 "config.json file or model folder; presets: {}",
                                                 name_or_path, fmt::join(model_preset_names(), ", ")));
}

}  // namespace longctx
