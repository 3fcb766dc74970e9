#include "planner/core/json_duplicates.h"

#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace longctx {

Result<bool> refuse_duplicate_keys(const std::string& text, const std::string& what) {
  // Per open object, the keys met so far and the key it sits under (its place in the file).
  struct Open {
    std::set<std::string> keys;
    std::string under;
  };
  std::vector<Open> open;
  std::string last_key, repeated;
  const auto place = [&](const std::string& key) {
    std::vector<std::string> parts;
    for (const Open& o : open)
      if (!o.under.empty()) parts.push_back(o.under);
    parts.push_back(key);
    return fmt::format("{}", fmt::join(parts, "."));
  };
  auto on_event = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (!repeated.empty()) return false;  // found: the rest is not read
    if (event == E::object_start) {
      open.push_back({{}, last_key});
      last_key.clear();
    } else if (event == E::object_end) {
      open.pop_back();
    } else if (event == E::key && !open.empty()) {
      last_key = parsed.get<std::string>();
      if (!open.back().keys.insert(last_key).second) repeated = place(last_key);
    } else if (event == E::array_start) {
      last_key.clear();  // an object inside an array sits under no key of its own
    }
    return true;
  };
  (void)nlohmann::json::parse(text, on_event, /*allow_exceptions=*/false);
  if (repeated.empty()) return true;
  return Error::bad_input(what, fmt::format("{} is given twice in one object; a JSON reader keeps one of the two without "
                                            "a word: keep the one you mean",
                                            repeated));
}

}  // namespace longctx
