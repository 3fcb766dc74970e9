#pragma once
// Builds the graph of one training step (forward, loss, backward, optimizer) of a Llama
// model on one rank under one configuration. docs/memory-model.md lists every tensor it
// creates with its shape; the runtime allocates the same tensors.
//
// The buffers are sized by footprint functions (longctx/planner/footprint/), pure functions
// of the step's shapes, one header per technique family; the ops are written by one source
// per technique (planner/src/step/), forward and backward together (docs/footprints.md).
// tests/unit/step_graph_golden_test.cpp holds the graph byte for byte.
#include "longctx/planner/hardware.h"
#include "longctx/planner/model_config.h"
#include "longctx/planner/parallel_config.h"
#include "longctx/planner/step_graph.h"

namespace longctx {

struct StepInputs {
  ModelConfig model;
  Cluster cluster;
  Backend backend = Backend::Cuda;
  TrainConfig train;
  ParallelConfig parallel;
  // Build only up to the end of the last layer's backward. Every op there has at most the
  // live set it has in the whole step (later readers are missing, never extra), so a prefix
  // over budget proves the step is: the search's cheap rejection.
  bool prefix_only = false;
  // CPU backend: intra-op threads (Hardware::threads), for the flash kernel's per-thread buffers.
  std::int64_t cpu_threads = 1;
  // CUDA: streaming multiprocessors (Hardware::multiprocessors), for per-SM partial buffers.
  std::int64_t multiprocessors = 0;
  // CUDA: one cuBLAS workspace (Hardware::cublas_workspace_bytes); 0: none modelled.
  std::int64_t cublas_workspace_bytes = 0;
};

// REQUIRES: validate(model, cluster, train, parallel) holds.
StepGraph build_step(const StepInputs& in);

}  // namespace longctx
