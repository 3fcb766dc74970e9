// The `--techniques` words, as the knob table's rows declare them (knobs.h).
#include <algorithm>
#include <array>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/core/knobs.h"

namespace longctx {
namespace {

// Every position from 0 to kTechniques - 1 names one word: the enumerators index a bitset.
constexpr bool positions_are_a_permutation() {
  std::array<int, kTechniques> seen{};
#define LONGCTX_TECHNIQUE(name, word, position) \
  if (position < 0 || position >= kTechniques || seen[position]++ != 0) return false;
#define LONGCTX_KNOB_TECHNIQUES(field, Type, section, techniques, rule) LONGCTX_EXPAND_TECHNIQUES techniques
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_TECHNIQUES)
#undef LONGCTX_TECHNIQUE
  return true;
}
static_assert(positions_are_a_permutation(), "each technique's position in knobs.h must be unique and below kTechniques");

std::size_t bit(Technique t) { return static_cast<std::size_t>(t); }

}  // namespace

std::string to_string(Technique t) {
  switch (t) {
#define LONGCTX_TECHNIQUE(name, word, position) \
  case Technique::name: return word;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_TECHNIQUES)
#undef LONGCTX_TECHNIQUE
#undef LONGCTX_KNOB_TECHNIQUES
  }
  return "?";
}

std::vector<std::string> technique_names(const TechniqueSet& s) {
  std::vector<std::string> out;
  for (int i = 0; i < kTechniques; ++i)
    if (s.test(static_cast<std::size_t>(i))) out.push_back(to_string(static_cast<Technique>(i)));
  return out;
}

TechniqueSet all_techniques() { return TechniqueSet().set(); }

bool has(const TechniqueSet& s, Technique t) { return s.test(bit(t)); }

Result<TechniqueSet> parse_techniques(const std::string& text) {
  if (text == "all") return all_techniques();
  TechniqueSet s;
  if (text == "none") return s;
  // An empty list is a mistake (an unset shell variable), as "," is; "none" says it.
  if (text.empty() || text.find_first_not_of(", ") == std::string::npos)
    return Error::bad_input("--techniques", fmt::format("'{}' names no technique; write none for no technique, all, or a "
                                                        "comma list of: {}",
                                                        text, fmt::join(technique_names(all_techniques()), ",")));
  // A list that ends in a comma names nothing after it, as one that starts with one does.
  if (text[text.find_last_not_of(' ')] == ',')
    return Error::bad_input("--techniques", fmt::format("'{}' ends with a comma: name a technique after it or drop it", text));
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    bool found = false;
    for (int i = 0; i < kTechniques; ++i)
      if (item == to_string(static_cast<Technique>(i))) {
        s.set(static_cast<std::size_t>(i));
        found = true;
      }
    if (!found)
      return Error::bad_input("--techniques", fmt::format("'{}' is not a technique; known: {}", item,
                                                          fmt::join(technique_names(all_techniques()), ", ")));
  }
  return s;
}

std::optional<Technique> technique_for(KnobId id, KnobValue v) {
  const Knob& k = knob(id);
  if (v <= k.plain) return std::nullopt;
  if (k.rule.technique_of) return technique_for(*k.rule.technique_of, knob(*k.rule.technique_of).plain + 1);
  if (k.techniques.empty()) return std::nullopt;
  const auto i = static_cast<std::size_t>(std::min<KnobValue>(v - k.plain, static_cast<KnobValue>(k.techniques.size())));
  return k.techniques[i - 1];
}

bool technique_allows(const TechniqueSet& allowed, KnobId id, KnobValue v) {
  const auto t = technique_for(id, v);
  return !t || has(allowed, *t);
}

Result<bool> check_knobs_allowed(const Knobs& fixed, const TechniqueSet& allowed) {
  for (const Knob& k : knob_table()) {
    const auto v = fixed_value(fixed, k.id);
    if (v && !technique_allows(allowed, k.id, *v))
      return Error::bad_input(k.flag, fmt::format("needs '{}' in --techniques", to_string(*technique_for(k.id, *v))));
  }
  return true;
}

}  // namespace longctx
