#pragma once
// Builds the graph of one training step (forward, loss, backward, optimizer) of a Llama
// model on one rank under one configuration. docs/memory-model.md lists every tensor it
// creates with its shape; the runtime allocates the same tensors.
//
// The buffers are sized by footprint functions (planner/footprint/), pure functions
// of the step's shapes, one header per technique family; the ops are written by one source
// per technique in the stack's folder (planner/stacks/<name>/, planner/stacks/blocks/), forward
// and backward together (docs/footprints.md).
// tests/unit/step_graph_golden_test.cpp holds the graph byte for byte.
#include "planner/core/step_inputs.h"
#include "planner/graph/step_graph.h"

namespace longctx {


// REQUIRES: validate(model, cluster, train, parallel) holds.
StepGraph build_step(const StepInputs& in);

}  // namespace longctx
