#pragma once
// A training stack as one object: whose code runs the step (core/stack.h names them), what
// that code can express, and how its step is written. Every question the rest of longctx asks
// about a stack goes to its profile; adding a stack is a folder under planner/stacks/ with its
// profile, and one line in registry.cpp.
//
// Invariant: stack_profile(k).kind == k for every StackKind.
#include <vector>

#include "planner/core/knobs.h"
#include "planner/core/stack.h"

namespace longctx {

namespace step {
struct StepBuild;
}

struct StackProfile {
  StackKind kind;
  const char* name;  // the --stack word, to_string(kind)
  // The techniques the search may use on this stack (a --techniques list is cut to these).
  TechniqueSet (*techniques)(const StackSpec& spec);
  // Writes one rank's step graph into sb. REQUIRES: validate() holds for sb's inputs.
  void (*build_step)(step::StepBuild& sb);
};

// The profile of stack k.
const StackProfile& stack_profile(StackKind k);
// Every stack, longctx's own runtime first.
const std::vector<const StackProfile*>& stack_profiles();

}  // namespace longctx
