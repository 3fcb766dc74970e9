#include "planner/io/toml_text.h"

#include "planner/io/quoted_text.h"

#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace longctx {
namespace {

using nlohmann::json;

bool bare_key(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::string key_text(const std::string& k) { return bare_key(k) ? k : toml_quoted(k); }

Result<std::string> scalar(const json& v, const std::string& key) {
  if (v.is_string()) return toml_quoted(v.get_ref<const std::string&>());
  if (v.is_boolean() || v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    if (!std::isfinite(v.get<double>())) return Error::bad_input(key, "is not a finite number");
    std::string s = v.dump();  // shortest round-trip form
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return s;
  }
  if (v.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].is_array() || v[i].is_object()) return Error::bad_input(key, "nests an array or table in an array");
      LONGCTX_TRY(std::string item, scalar(v[i], key));
      out += (i ? ", " : "") + item;
    }
    return out + "]";
  }
  return Error::bad_input(key, v.is_null() ? "is null, which TOML has no value for" : "nests a table inside a table");
}

}  // namespace

Result<std::string> to_toml(const json& value, const std::vector<std::string>& comment) {
  if (!value.is_object()) return Error::bad_input("toml", "the document must be a table (a JSON object)");
  std::string out;
  for (const std::string& line : comment) out += "# " + comment_text(line) + "\n";
  for (const auto& [k, v] : value.items()) {
    if (v.is_object()) continue;
    LONGCTX_TRY(std::string text, scalar(v, k));
    out += fmt::format("{} = {}\n", key_text(k), text);
  }
  for (const auto& [k, v] : value.items()) {
    if (!v.is_object()) continue;
    out += fmt::format("\n[{}]\n", key_text(k));
    for (const auto& [ik, iv] : v.items()) {
      LONGCTX_TRY(std::string text, scalar(iv, k + "." + ik));
      out += fmt::format("{} = {}\n", key_text(ik), text);
    }
  }
  return out;
}

}  // namespace longctx
