#pragma once
// The core of a step being written, which every stack's builder shares: the inputs and the
// shapes derived from them, the graph, each parameter group's parameters and gradients, and
// the batch and head tensors every model has. A stack's builder derives its own build from
// StepBuild with what only it keeps (planner/stacks/<name>/, planner/stacks/blocks/).
// Shapes: footprint/step_shapes.h.
#include <vector>

#include "planner/core/step_inputs.h"
#include "planner/footprint/step_shapes.h"
#include "planner/graph/step_graph.h"
#include "planner/stacks/step/graph_writer.h"

namespace longctx::step {

// A tensor's index in the graph; -1: absent under this configuration.
using TensorId = int;

// Tensors of the batch, the loss and the head, shared by the embedding, the loss and the
// layers' schedule.
struct OuterActs {
  TensorId tokens = -1;     // token ids [n] int64
  TensorId targets = -1;    // target ids [n] int64
  TensorId final_x = -1;    // last layer's output, the final norm's input [n, h] e
  TensorId rstd_f = -1;     // final norm's rstd [n] fp32
  TensorId xf = -1;         // final norm's output [n, h] e
  TensorId logp = -1;       // untiled loss: log-softmax [n, V] fp32
  TensorId head_full = -1;  // the head group's gathered parameters (zero3; DeepSpeed's lm_head)
  TensorId tied_full = -1;  // zero3, tied: the embedding gathered again for the output projection
  TensorId tied_grad = -1;  // tied: the embedding's gradient, first produced by the loss
};

struct StepBuild {
  explicit StepBuild(const StepInputs& inputs);
  // A build hands out references to itself (the stacks' schedules hold one): it stays put.
  StepBuild(const StepBuild&) = delete;
  StepBuild& operator=(const StepBuild&) = delete;

  const StepInputs& in;
  const ParallelConfig& parallel;
  footprint::StepShapes shapes;
  GraphWriter graph;

  std::vector<TensorId> params;  // per group: its parameters (a shard where the stack shards them)
  std::vector<Ids> grads;        // per group: what the optimizer step reads
  OuterActs outer;

  // Whether the build ends here, where a prefix build ends (after the last layer's backward;
  // a stack that does not stop its backward there, before the optimizer step): a prefix build
  // does, and a whole build where StepInputs::end_at_prefix says so of the graph so far. Asked
  // once; the answer stands for the rest of the build.
  bool ends_at_prefix();

  // A group's tensor name ("layer.3.", "embed.", "head.").
  Name group_name(int group, const char* base) const;
  // The layer a group's ops run among, -1 for the embedding and the head.
  int layer_of_group(int group) const { return group < shapes.layers ? group : -1; }

 private:
  bool prefix_asked_ = false, prefix_ended_ = false;  // ends_at_prefix
};

// The cuBLAS workspaces every stack's step holds (begin_step), -1 where none is modelled.
struct CublasWorkspaces {
  int forward = -1;
  int backward = -1;
};
CublasWorkspaces begin_step(StepBuild& sb);
// Places the workspaces at the first matmul of forward and of backward, and hands the graph over.
StepGraph finish_step(StepBuild& sb, CublasWorkspaces w);

// One stack's whole step: `body` writes its ops into `sb` (a StepBuild or a stack's build
// derived from it) between begin_step and finish_step.
template <class Build>
StepGraph write_step(Build& sb, void (*body)(Build&)) {
  const CublasWorkspaces w = begin_step(sb);
  body(sb);
  return finish_step(sb, w);
}

}  // namespace longctx::step
