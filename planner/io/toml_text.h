#pragma once
// TOML text from a JSON object of tables: the small emitter torchtitan's job file needs
// (tables of scalars and of arrays of scalars, nothing nested deeper), so that no TOML library
// is a dependency.
//
// The output is what Python's tomllib reads back as the same value:
//   - each top-level key whose value is an object is a `[table]` of `key = value` lines;
//     top-level scalars come first, before any table;
//   - strings basic-quoted (toml_quoted, planner/io/quoted_text.h: control characters
//     escaped); comment lines stay one line (comment_text);
//   - floats always with a '.' or an exponent ("1.0", "1e-05"): TOML reads "1" as an integer;
//   - keys bare when they are [A-Za-z0-9_-]+, quoted otherwise.
// Keys come in the json's order (nlohmann::json sorts them). Nested tables, arrays of tables
// and null are not emitted: to_toml returns an error naming the key instead.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"

namespace longctx {

// `comment` lines come first, each as "# line".
Result<std::string> to_toml(const nlohmann::json& value, const std::vector<std::string>& comment = {});

}  // namespace longctx
