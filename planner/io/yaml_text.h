#pragma once
// YAML text from a JSON value: the small emitter the export files need (maps, lists and
// scalars in block style, nothing else), so that no YAML library is a dependency.
//
// The output is what PyYAML and every YAML 1.1/1.2 reader read back as the same value:
//   - maps as `key: value` blocks, lists as `- item` blocks, nested by two spaces; an empty
//     map or list as `{}` / `[]`;
//   - strings always double-quoted (yaml_quoted, planner/io/quoted_text.h: every control
//     byte escaped, never raw), so "yes", "1e5", "null" or ": " stay strings and a newline in
//     a name cannot start a key; comment lines likewise stay one line (comment_text);
//   - keys bare when they are identifiers ([A-Za-z_][A-Za-z0-9_.-]*), quoted otherwise;
//   - floats always with a '.' before an exponent ("1.0e-05"): PyYAML reads "1e-05" as text.
// Keys come in the json's order (nlohmann::json sorts them).
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace longctx {

// `comment` lines come first, each as "# line".
std::string to_yaml(const nlohmann::json& value, const std::vector<std::string>& comment = {});

}  // namespace longctx
