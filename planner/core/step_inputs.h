#pragma once
// What one rank's training step is built from: the model, the cluster, the training settings
// and the parallel configuration, plus what the backend tells about itself. The step builders
// (planner/stacks/) write the step from it; the footprints (planner/footprint/) size its
// buffers from the shapes derived from it (footprint/step_shapes.h).
#include <cstdint>
#include <functional>

#include "planner/core/hardware.h"
#include "planner/core/model_config.h"
#include "planner/core/parallel_config.h"

namespace longctx {

class StepGraph;

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
  // A whole build asks this, where a prefix build would end, of the graph written up to there
  // (its last readers those of the ops so far, as StepGraph::finalize sets them), and ends there
  // as a prefix build where it says so: the search refutes a step by its prefix and builds the
  // rest only where the prefix fits, without writing the prefix twice. Null: the whole step.
  const std::function<bool(const StepGraph&)>* end_at_prefix = nullptr;
  // Build only the model states each stack makes before its first op (parameters, optimizer
  // states, their host copies): tensors the whole step holds at every op, never freed, so
  // their sum over budget proves the step is, before any layer is built (standing_bytes).
  bool states_only = false;
  // CPU backend: intra-op threads (Hardware::threads), for the flash kernel's per-thread buffers.
  std::int64_t cpu_threads = 1;
  // CUDA: streaming multiprocessors (Hardware::multiprocessors), for per-SM partial buffers.
  std::int64_t multiprocessors = 0;
  // CUDA: one cuBLAS workspace (Hardware::cublas_workspace_bytes); 0: none modelled.
  std::int64_t cublas_workspace_bytes = 0;
};

}  // namespace longctx
