#pragma once
// One rule for every value a flag takes, in both programs, checked by CLI11 before any value
// is converted: no empty or blank value (`--attention ""` is a mistake, not "not given"), no
// control bytes, no spaces around a value (`'512 '` and `' 512'` alike), and whole numbers
// (the options CLI11 converts to integers) written in plain decimal digits within int64:
// `--gpus 0x8`, `--gpus -1` and `--gpus 99999999999999999999` are refused as `--seq 0x10` is;
// numbers (the options CLI11 converts to floating point: `calibrate --seconds`) written in
// decimal, so nan, inf and hex floats, which CLI11 would convert, are refused too.
// Refusals are CLI11 ValidationErrors, reported by report_parse_error as every error is.
// A row's own range check (CLI::Range, or a validator of its own) may come before these: one
// that meets text it cannot read whole leaves it to them (whole_number_or_defer).
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace longctx::cli {

namespace value_rules {

inline bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// "" when `text` may be a value; else why not.
inline std::string any_value(const std::string& text) {
  if (text.find_first_not_of(" \t") == std::string::npos)
    return "is empty; give a value, or leave the option out for its default";
  for (unsigned char c : text)
    if (is_control(c)) return "holds a control character; write the value in plain text";
  if (text.front() == ' ' || text.front() == '\t' || text.back() == ' ' || text.back() == '\t')
    return "'" + text + "' has spaces around it; write the value without them";
  return "";
}

// any_value for an option that must be given (it has no default to fall back on).
inline std::string required_value(const std::string& text) {
  if (text.find_first_not_of(" \t") == std::string::npos) return "is empty; give a value (the option has no default)";
  return any_value(text);
}

// "" when `text` is a whole number in plain decimal within int64.
inline std::string whole_number(const std::string& text) {
  if (std::string why = any_value(text); !why.empty()) return why;
  if (text.size() > 1 && text[0] == '-' && text.find_first_not_of("0123456789", 1) == std::string::npos)
    return "'" + text + "' is negative; give a whole number in decimal digits, like 8";
  if (text.find_first_not_of("0123456789") != std::string::npos)
    return "'" + text + "' is not a whole number; write it in decimal digits, like 8";
  const std::string digits = text.substr(std::min(text.find_first_not_of('0'), text.size() - 1));
  if (digits.size() > 19 || (digits.size() == 19 && digits > "9223372036854775807"))
    return "'" + text + "' is far above any bound longctx has; give a realistic count";
  return "";
}

// "" when `text` is a number in decimal (digits, a point, an exponent): not nan, inf or a hex float.
inline std::string decimal_number(const std::string& text) {
  if (std::string why = any_value(text); !why.empty()) return why;
  const bool decimal = text.find_first_not_of("0123456789.eE+-") == std::string::npos &&
                       text.find_first_of("0123456789") != std::string::npos;
  if (!decimal) return "'" + text + "' is not a number; write it in decimal, like 0.5";
  return "";
}

// The value of a whole number in plain decimal within int64, or nothing: text the rules above
// refuse, which a row's own range check leaves to them.
inline std::optional<long long> whole_number_or_defer(const std::string& text) {
  if (!whole_number(text).empty() && !(text.size() > 1 && text[0] == '-' && whole_number(text.substr(1)).empty()))
    return std::nullopt;
  return std::stoll(text);
}

}  // namespace value_rules

// Adds the rules above to every option of `app` and of its subcommands that takes a value
// (flags take none); the integer rule to those CLI11 converts to integers (type name "INT").
// Call once, after every option is added and before parsing.
inline void apply_value_rules(CLI::App& app) {
  static const CLI::Validator any(value_rules::any_value, "", "value");
  static const CLI::Validator required(value_rules::required_value, "", "value");
  static const CLI::Validator whole(value_rules::whole_number, "", "whole number");
  static const CLI::Validator decimal(value_rules::decimal_number, "", "number");
  for (CLI::Option* o : app.get_options()) {
    if (o->get_type_size_max() == 0 || o->get_expected_max() == 0) continue;  // a flag
    // CLI11 appends each validator's description ("INT:N >= 1", "FLOAT:FLOAT in [0.01 - 60]"):
    // the converted type is the name before the first colon.
    const std::string full = o->get_type_name();
    const std::string type = full.substr(0, full.find(':'));
    o->check(type == "INT" ? whole : type == "FLOAT" ? decimal : o->get_required() ? required : any);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apply_value_rules(*sub);
}

}  // namespace longctx::cli
