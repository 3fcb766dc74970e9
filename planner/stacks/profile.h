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
#include "planner/core/step_inputs.h"
#include "planner/graph/step_graph.h"
#include "planner/stacks/exporter.h"

namespace longctx {

struct StackProfile {
  StackKind kind;
  const char* name;  // the --stack word, to_string(kind)
  // The techniques the search may use on this stack (a --techniques list is cut to these).
  TechniqueSet (*techniques)(const StackSpec& spec);
  // One rank's step graph, written by the stack's builder (planner/stacks/<name>/).
  // REQUIRES: validate() holds for the inputs.
  StepGraph (*build_step)(const StepInputs& in);
  // Its `longctx export --stack` word, writer and refusals (planner/stacks/<name>/export.h;
  // longctx's own plans export as a bare DeepSpeed config).
  const StackExporter* exporter;
};

// The profile of stack k.
const StackProfile& stack_profile(StackKind k);
// Every stack, longctx's own runtime first.
const std::vector<const StackProfile*>& stack_profiles();

}  // namespace longctx
