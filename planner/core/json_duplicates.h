#pragma once
// Keys given twice in one JSON object. nlohmann::json keeps the last of them and says nothing,
// so a plan file or a hardware file edited by hand ("ulysses": 2, ... "ulysses": 4) would be
// read as one of its two values without a word. longctx's own files never repeat a key.
#include <string>

#include "common/result.h"

namespace longctx {

// BadInput naming `what` and the key's place (`parallel.ulysses`) where an object of `text`
// holds a key twice. REQUIRES: text is JSON its caller has parsed already (a syntax error here
// is the caller's to report: none is returned).
Result<bool> refuse_duplicate_keys(const std::string& text, const std::string& what);

}  // namespace longctx
