#include "planner/search/length_refusals.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "planner/stacks/length_rule.h"

namespace longctx {
namespace {

// "2, 4 or 8"
template <class T>
std::string either(const std::vector<T>& values) {
  std::string s;
  for (std::size_t i = 0; i < values.size(); ++i)
    s += fmt::format("{}{}", i == 0 ? "" : i + 1 == values.size() ? " or " : ", ", values[i]);
  return s;
}

}  // namespace

std::int64_t nearby_length(std::int64_t seq, std::int64_t multiple) {
  return seq >= multiple ? seq / multiple * multiple : multiple;
}

void LengthRefusals::note(const Plan& c) {
  const auto multiple = unmet_length_multiple(c);
  if (!multiple) return;
  Plan at = c;
  at.train.seq = nearby_length(c.train.seq, *multiple);
  if (!validate(at)) return;  // another rule refuses it too: the length is not why
  const Layout l{c.parallel.ulysses, c.parallel.ring, *multiple};
  if (std::find(refused_.begin(), refused_.end(), l) == refused_.end()) refused_.push_back(l);
  seq_ = c.train.seq;
  stack_ = to_string(c.train.stack.kind);
}

std::string LengthRefusals::explain() const {
  if (refused_.empty()) return "";
  std::vector<Layout> layouts = refused_;
  std::stable_sort(layouts.begin(), layouts.end(), [](const Layout& a, const Layout& b) { return a.multiple < b.multiple; });
  std::vector<std::string> names;
  std::vector<std::int64_t> pieces;
  std::int64_t all = 1;  // a length every refused layout takes: the least common multiple
  const bool one_ulysses = std::all_of(layouts.begin(), layouts.end(), [&](const Layout& l) { return l.ulysses == layouts[0].ulysses; });
  for (const Layout& l : layouts) {
    std::string ring = fmt::format("{}", l.ring);
    if (!one_ulysses) ring = fmt::format("--ulysses {} --ring {}", l.ulysses, l.ring);
    names.push_back(ring);
    if (std::find(pieces.begin(), pieces.end(), l.multiple) == pieces.end()) pieces.push_back(l.multiple);
    all = std::lcm(all, l.multiple);
  }
  std::string which = either(names);
  if (one_ulysses) which = fmt::format("{}--ring {}", layouts[0].ulysses > 1 ? fmt::format("--ulysses {} ", layouts[0].ulysses) : "", which);
  return fmt::format("the plans with {} were not tried: --stack {} {}, which --seq {} does not meet: give a --seq "
                     "divisible by {}, such as {}, to try them",
                     which, stack_, length_rule(either(pieces)), seq_, all, nearby_length(seq_, all));
}

}  // namespace longctx
