#include "planner/io/yaml_text.h"

#include "planner/io/quoted_text.h"

#include <cctype>

#include <nlohmann/json.hpp>

namespace longctx {
namespace {

bool bare_key(const std::string& k) {
  if (k.empty() || !(std::isalpha(static_cast<unsigned char>(k[0])) || k[0] == '_')) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  return true;
}

std::string key_text(const std::string& k) { return bare_key(k) ? k : yaml_quoted(k); }

std::string scalar_text(const nlohmann::json& v) {
  if (v.is_number_float()) {
    std::string s = v.dump();
    const auto e = s.find_first_of("eE");
    if (e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
    return s;
  }
  if (v.is_string()) return yaml_quoted(v.get_ref<const std::string&>());
  return v.dump();  // null, true, false, integers as such
}

bool is_block(const nlohmann::json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

void emit(const nlohmann::json& v, int indent, std::string& out);

// A list item or map value that is itself a block starts on the next line, one level in.
void emit_value_after(const nlohmann::json& v, int indent, std::string& out) {
  if (is_block(v)) {
    out += '\n';
    emit(v, indent, out);
  } else {
    out += ' ';
    out += v.is_object() ? "{}" : v.is_array() ? "[]" : scalar_text(v);
    out += '\n';
  }
}

void emit(const nlohmann::json& v, int indent, std::string& out) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (v.is_object()) {
    for (const auto& [k, item] : v.items()) {
      out += pad + key_text(k) + ':';
      emit_value_after(item, indent + 2, out);
    }
  } else if (v.is_array()) {
    for (const auto& item : v) {
      out += pad + '-';
      emit_value_after(item, indent + 2, out);
    }
  } else {
    out += pad + scalar_text(v) + '\n';
  }
}

}  // namespace

std::string to_yaml(const nlohmann::json& value, const std::vector<std::string>& comment) {
  std::string out;
  for (const auto& line : comment) out += line.empty() ? "#\n" : "# " + comment_text(line) + '\n';
  if (!is_block(value)) {
    out += value.is_object() ? "{}\n" : value.is_array() ? "[]\n" : scalar_text(value) + '\n';
    return out;
  }
  emit(value, 0, out);
  return out;
}

}  // namespace longctx
