#include "planner/core/presets.h"

#include <map>

namespace longctx::presets {
namespace data {
extern const std::map<std::string_view, std::string_view> models;
extern const std::map<std::string_view, std::string_view> hardwares;
}  // namespace data

namespace {
std::optional<std::string_view> find(const std::map<std::string_view, std::string_view>& m,
                                     std::string_view name) {
  auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return it->second;
}
std::vector<std::string> names(const std::map<std::string_view, std::string_view>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.emplace_back(k);
  return out;
}
}  // namespace

std::optional<std::string_view> model(std::string_view name) { return find(data::models, name); }
std::optional<std::string_view> hardware(std::string_view name) { return find(data::hardwares, name); }
std::vector<std::string> model_names() { return names(data::models); }
std::vector<std::string> hardware_names() { return names(data::hardwares); }

}  // namespace longctx::presets
