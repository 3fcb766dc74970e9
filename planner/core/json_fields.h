#pragma once
// Reading typed fields out of user JSON with errors that name the field.
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "common/result.h"

namespace longctx::json_fields {

// REQUIRES: j is an object. Missing, wrong-typed, too small or too large values are errors;
// `max` is one of longctx::limits, so the message says it is longctx's bound.
inline Result<std::int64_t> get_int(const nlohmann::json& j, const std::string& prefix,
                                    const std::string& key, std::int64_t min = 1,
                                    std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
  const std::string field = prefix.empty() ? key : prefix + "." + key;
  auto it = j.find(key);
  if (it == j.end()) return Error::bad_input(field, "missing; add it as an integer");
  // An integer past 64 bits is read as a float (1180591620717411303424 as 1.18e+21): past the bound.
  if (it->is_number_float() && std::fabs(it->get<double>()) >= 9.2e18)
    return Error::bad_input(field, fmt::format("{} is {} longctx's bound of {} (real models and clusters stay far "
                                               "within it)",
                                               it->dump(), it->get<double>() > 0 ? "above" : "below",
                                               it->get<double>() > 0 ? max : min));
  if (!it->is_number_integer())
    return Error::bad_input(field, fmt::format("must be an integer, found {}", it->dump()));
  // Unsigned values past INT64_MAX would wrap to negative numbers in get<std::int64_t>().
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(max))
    return Error::bad_input(field, fmt::format("{} is above longctx's bound of {} (real models and clusters stay far below it)", it->dump(), max));
  const std::int64_t v = it->get<std::int64_t>();
  if (v < min) return Error::bad_input(field, fmt::format("must be at least {}, found {}", min, v));
  if (v > max) return Error::bad_input(field, fmt::format("{} is above longctx's bound of {} (real models and clusters stay far below it)", v, max));
  return v;
}

inline Result<double> get_number(const nlohmann::json& j, const std::string& prefix,
                                 const std::string& key, bool positive = true) {
  const std::string field = prefix.empty() ? key : prefix + "." + key;
  auto it = j.find(key);
  if (it == j.end()) return Error::bad_input(field, "missing; add it as a number");
  if (!it->is_number()) return Error::bad_input(field, fmt::format("must be a number, found {}", it->dump()));
  const double v = it->get<double>();
  if (positive && !(v > 0)) return Error::bad_input(field, fmt::format("must be positive, found {}", v));
  return v;
}

inline Result<bool> get_bool(const nlohmann::json& j, const std::string& prefix, const std::string& key) {
  const std::string field = prefix.empty() ? key : prefix + "." + key;
  auto it = j.find(key);
  if (it == j.end()) return Error::bad_input(field, "missing; add true or false");
  if (!it->is_boolean()) return Error::bad_input(field, fmt::format("must be true or false, found {}", it->dump()));
  return it->get<bool>();
}

inline Result<std::string> get_string(const nlohmann::json& j, const std::string& prefix, const std::string& key) {
  const std::string field = prefix.empty() ? key : prefix + "." + key;
  auto it = j.find(key);
  if (it == j.end()) return Error::bad_input(field, "missing; add it as a string");
  if (!it->is_string()) return Error::bad_input(field, fmt::format("must be a string, found {}", it->dump()));
  return it->get<std::string>();
}

inline Result<nlohmann::json> get_object(const nlohmann::json& j, const std::string& prefix, const std::string& key) {
  const std::string field = prefix.empty() ? key : prefix + "." + key;
  auto it = j.find(key);
  if (it == j.end()) return Error::bad_input(field, "missing; add it as an object");
  if (!it->is_object()) return Error::bad_input(field, fmt::format("must be an object, found {}", it->type_name()));
  return *it;
}

// The first key of `object` not in `known`, as BadInput naming "prefix.key" (or "key" under an
// empty prefix) and every key `known` holds; `where` says whose keys they are ("under
// cluster.hardware", "in a hardware file"). A key longctx does not read would otherwise be
// ignored silently, a misspelt one leaving its field at its default. A non-object passes:
// its reader refuses it.
inline Result<bool> refuse_unknown_keys(const nlohmann::json& object, const std::string& prefix,
                                        const std::vector<std::string>& known, const std::string& where) {
  if (!object.is_object()) return true;
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::vector<std::string> sorted = known;
    std::sort(sorted.begin(), sorted.end());
    return Error::bad_input(prefix.empty() ? key : prefix + "." + key,
                            fmt::format("is not a key longctx reads {}; check its spelling (the keys{}: {}) or remove it",
                                        where, prefix.empty() ? "" : " there", fmt::join(sorted, ", ")));
  }
  return true;
}

// Parses text as JSON: nesting past kMaxJsonDepth (common/json_depth.h) is refused before
// parsing, naming the field; a syntax error names the file. A NUL byte is none of JSON's, and
// nlohmann's parser ends its input there (a plan file with one after it was read as whole).
inline Result<nlohmann::json> parse(const std::string& text, const std::string& what) {
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    return Error::bad_input(what, fmt::format("holds a NUL byte at byte {}, which JSON text never does; give the file "
                                              "as written",
                                              nul));
  LONGCTX_TRY(auto shallow, check_json_depth(text, what));
  (void)shallow;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error::bad_input(what, "is not valid JSON; check the file's syntax");
  if (!j.is_object()) return Error::bad_input(what, "must be a JSON object");
  return j;
}

// The text of a JSON input file (common/input_file.h: regular files only, at most
// input_limits::kJsonBytes), errors naming `what`.
Result<std::string> read_file(const std::string& path, const std::string& what);

}  // namespace longctx::json_fields
