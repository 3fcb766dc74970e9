#pragma once
// Parameter groups and ZeRO: which parameters a group holds, in what order, and the buffers
// of gathering a group's parameters and reduce-scattering its gradient. Shapes: step_shapes.h.
//
// Groups: layers 0..layers-1, then the embedding, then the head (final norm, and the output
// projection unless tied).
#include <cstdint>
#include <array>
#include <initializer_list>
#include <vector>

#include "planner/footprint/step_shapes.h"
#include "planner/core/param_layout.h"

namespace longctx::footprint {

int param_groups(const StepShapes& s);  // layers + 2
int embed_group(const StepShapes& s);   // layers
int head_group(const StepShapes& s);    // layers + 1

// Element counts of a group's parameters, in order; at most one per row of the table.
class ParamSizes {
 public:
  void push_back(std::int64_t elems) { elems_[count_++] = elems; }
  const std::int64_t* begin() const { return elems_; }
  const std::int64_t* end() const { return elems_ + count_; }
  int size() const { return count_; }

 private:
  std::int64_t elems_[kParamTable.size()] = {};
  int count_ = 0;
};

// ---- The parameter order ---------------------------------------------------------------
// The group's parameters in the order of the one parameter table (param_layout.h,
// kParamTable), which the runtime's weights, ZeRO's flat groups and the optimizer read too:
// a layer's attention norm [h], wq [H*d, h], wk [K*d, h], wv [K*d, h], wo [h, H*d], (q and k
// norms [d] each,) MLP norm [h], gate [I, h], up [I, h], down [h, I]; the embedding [V, h];
// the final norm [h] and the output projection [V, h] (absent when tied). Every element
// count of a group below derives from it.
ParamSizes param_sizes(const StepShapes& s, int group);

// Parameter elements of a group: the sum of its param_sizes, computed from the table by
// sum_of_param_sizes and kept in the shapes by step_shapes().
std::int64_t sum_of_param_sizes(const StepShapes& s, int group);

// Elements of the biases among `roles` that the model has (0 for a model without biases):
// a projection's gradient piece holds its weight's and its bias's gradients.
std::int64_t bias_params(const StepShapes& s, std::initializer_list<ParamRole> roles);
inline std::int64_t group_params(const StepShapes& s, int group) {
  if (group < s.layers) return s.layer_params;
  return group == static_cast<int>(s.layers) ? s.embed_params : s.head_params;
}

// Each parameter of a group as [rows, cols] in the table's order (cols 1 for a norm's weight).
std::vector<std::array<std::int64_t, 2>> param_dims(const StepShapes& s, int group);

// A rank's shard of a group: ceil(group_params / world) elements (the last rank's padded).
std::int64_t shard_elems(const StepShapes& s, int group);

// zero3 gather (runtime/src/sharded_params.cpp, ShardedParams::gather): the full buffer
// params.full [group_params] e. A shard that lives on the host (parameter streaming) is
// copied into its own slot of it and gathered in place: no staging buffer.
std::int64_t gathered_params_bytes(const StepShapes& s, int group);

// One rank, streamed layers (runtime/src/layer_executors.cpp, FetchedLayer): the layer's
// parameters come to the device as one copy per parameter, [its dims] e, in the table's
// order; 0 bytes for a parameter the model does not have. Autograd frees each copy once the
// last backward node that saved it has run; the copies no node saves (the biases of the
// untiled projections) go as soon as they are refilled.
std::int64_t param_copy_bytes(const StepShapes& s, const ParamSpec& p);
bool fetches_param_copies(const StepShapes& s, bool offload_params);

// Bytes a rank receives in the all-gather of a group's parameters (every other rank's shard);
// the all-gather of the updated shards after the optimizer step under zero1/zero2
// (runtime/src/sharded_params.cpp, ShardedParams::finish_step) moves as many.
double gather_received_bytes(const StepShapes& s, int group);

// zero2/zero3 reduce-scatter of a finished group gradient (runtime/src/sharded_params.cpp,
// ShardedParams::flatten_grads and finish_grads): the shard grad.shard [shard_elems] g, and
// across ranks a flat send buffer of the padded group [shard_elems * world] g into which the
// gradient's pieces are first summed. The pieces are freed before the shard is allocated,
// so the op holds pieces + send buffer, then send buffer + shard: with the pieces live
// through the op and the shard its output, its workspace is the send buffer less one shard
// (0 on one rank, where the pieces are summed into the shard's full-size buffer itself).
std::int64_t grad_shard_bytes(const StepShapes& s, int group);
std::int64_t reduce_scatter_workspace_bytes(const StepShapes& s, int group);

// Bytes a rank sends in the reduce-scatter: every other rank's shard of the gradient.
double reduce_scatter_sent_bytes(const StepShapes& s, int group);

// All-reduce of a group's gradient, ring: 2 (world-1)/world of it, sent by each rank. zero1
// (runtime/src/sharded_params.cpp, ShardedParams::prepare_step) and unsharded data parallel
// (runtime/src/runner.cpp, run_plan) reduce the gradients in place: no buffer of their own.
double all_reduce_sent_bytes(const StepShapes& s, int group);

}  // namespace longctx::footprint
