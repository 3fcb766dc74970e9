// The registry of stacks: one line a stack. Each profile lives in its stack's folder.
#include <stdexcept>

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

const StackProfile& stack_profile(StackKind k) {
  for (const StackProfile* p : stack_profiles())
    if (p->kind == k) return *p;
  throw std::logic_error("a StackKind without a profile in planner/stacks/registry.cpp");
}

}  // namespace longctx
