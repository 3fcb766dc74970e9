#pragma once
// Evaluates one configuration: builds the step graph, simulates it, and fills in a Plan's
// prediction. The single entry point the CLI, the search and the tests share.
#include <memory>

#include "longctx/planner/plan.h"
#include "longctx/planner/simulator.h"
#include "longctx/planner/step_builder.h"

namespace longctx {

struct Evaluation {
  Plan plan;            // the inputs, with prediction filled in
  StepGraph graph;      // what was simulated
  SimResult sim;
};

// The breakdown keys of PLAN: the step categories, plus "allocator" (reserved minus
// allocated; 0 in the prediction of allocated bytes) and "context" (outside the allocator).
// REQUIRES: plan's inputs are valid (plan_from_json and the CLI validate them).
Evaluation evaluate(const Plan& inputs);

// Just the numbers, for the search's inner loop.
Prediction predict(const Plan& inputs);

}  // namespace longctx
