#pragma once
// A bound on how deeply JSON text nests, checked over the bytes before any parser builds a
// value: nlohmann::json copies, compares and prints values recursively, so a 200 KB file of
// 100,000 nested '[' would overflow the stack in the first copy. Every JSON input longctx
// reads (plan files, config.json, --gpu files, traces, manifests, Python's plan and config
// text) passes this check first; its files nest a few levels, so the bound costs nothing.
#include <string>
#include <string_view>

#include "common/result.h"

namespace longctx {

inline constexpr int kMaxJsonDepth = 64;

// BadInput when `text` opens more than `max_depth` arrays and objects inside one another.
// The error's field is the path of keys down to the nesting ("parallel.ring", the object
// keys above the first array; `what` when the top level itself nests), its message says how
// deep and where (byte offset) in `what` (the file or option). Malformed JSON is left to the
// parser: only the nesting is checked here.
Result<bool> check_json_depth(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

}  // namespace longctx
