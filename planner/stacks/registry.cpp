// The registry of stacks: one line a stack. Each profile lives in its stack's folder. The
// stack words (`--stack`, the plan file's train.stack.name), the stacks' defaults and their
// descriptions (core/stack.h) are the profiles'.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/stacks/profile.h"

namespace longctx {

extern const StackProfile kLongctxProfile;
extern const StackProfile kHfProfile;
extern const StackProfile kArcticProfile;
extern const StackProfile kTorchtitanProfile;

const std::vector<const StackProfile*>& stack_profiles() {
  static const std::vector<const StackProfile*> all = {&kLongctxProfile, &kHfProfile, &kArcticProfile,
                                                       &kTorchtitanProfile};
  return all;
}

namespace {

const StackProfile* find_profile(StackKind k) {
  for (const StackProfile* p : stack_profiles())
    if (p->kind == k) return p;
  return nullptr;
}

}  // namespace

const StackProfile& stack_profile(StackKind k) {
  if (const StackProfile* p = find_profile(k)) return *p;
  throw std::logic_error("a StackKind without a profile in planner/stacks/registry.cpp");
}

std::string to_string(StackKind k) {
  const StackProfile* p = find_profile(k);
  return p ? p->name : "?";
}

Result<StackKind> parse_stack_kind(const std::string& text, const std::string& field) {
  std::vector<std::string> names;
  for (const StackProfile* p : stack_profiles()) {
    if (text == p->name) return p->kind;
    names.emplace_back(p->name);
  }
  return Error::bad_input(field, fmt::format("'{}' is not one of {}", text, fmt::join(names, ", ")));
}

StackSpec default_stack(StackKind k) { return stack_profile(k).defaults; }

std::string describe(const StackSpec& s) { return stack_profile(s.kind).describe(s); }

TechniqueSet stack_techniques(const Plan& p) { return stack_profile(p.train.stack.kind).techniques(p); }

bool takes_option(const StackProfile& s, SettingId id) {
  return std::find(s.options.begin(), s.options.end(), id) != s.options.end();
}

std::string stacks_taking(SettingId id) {
  std::vector<std::string> stacks;
  for (const StackProfile* p : stack_profiles())
    if (takes_option(*p, id)) stacks.push_back(fmt::format("--stack {}", p->name));
  return fmt::format("{}", fmt::join(stacks, " or "));
}

}  // namespace longctx
