// FSDP2's ops (blocks/fsdp2.h), with the lifetimes torch 2.11's FSDPParamGroup gives their
// buffers (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: wait_for_unshard keeps a
// forward all-gather's output as all_gather_state until the next group's copy-out, frees a
// backward one at its own; post_backward keeps the reduce-scatter input as
// reduce_scatter_state until the next reduce; the root's post-forward and backward's final
// callback free the last of each).
#include "planner/stacks/blocks/fsdp2.h"

#include <algorithm>

#include "planner/footprint/fsdp2.h"
#include "planner/footprint/zero.h"

namespace longctx::step::blocks {

using namespace footprint;

namespace {
// On CUDA FSDP2 allocates a gather's buffers on its all-gather copy-in stream and a
// reduce-scatter's output on its reduce-scatter stream; their freed blocks stay with those
// streams (the reserved replay keeps a pool per stream).
constexpr int kAllGatherStream = 1, kReduceScatterStream = 2;

}  // namespace

void Fsdp2::join(int joined, int into) {
  joined_ = joined;
  into_ = into;
}

std::vector<int> Fsdp2::members(int group) const {
  if (group == into_) return {group, joined_};
  return {group};
}

template <class Bytes>
std::int64_t Fsdp2::summed(int group, Bytes bytes) const {
  std::int64_t total = 0;
  for (int g : members(group)) total += bytes(g);
  return total;
}

Fsdp2::Fsdp2(StepBuild& sb, std::int64_t reduce_e)
    : sb_(sb),
      reduce_e_(reduce_e),
      gathered_(static_cast<std::size_t>(param_groups(sb.shapes)), -1),
      unsharded_(static_cast<std::size_t>(param_groups(sb.shapes)), -1) {}

void Fsdp2::model_states() {
  StepBuild& sb = sb_;
  const StepShapes& s = sb.shapes;
  const int groups = param_groups(s);
  sb.params.resize(static_cast<std::size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    sb.params[static_cast<std::size_t>(g)] =
        sb.graph.persistent(sb.group_name(g, "params.shard"), fsdp2::shard_bytes(s, g), Category::Params, Place::Device);
    sb.graph.persistent(sb.group_name(g, "optim.state"), fsdp2::adamw_state_bytes(s, g), Category::Optimizer,
                        Place::Device);
  }
  sb.grads.assign(static_cast<std::size_t>(groups), Ids{});
}

void Fsdp2::prefetch(int group, Phase phase) {
  if (group == joined_) return;
  StepBuild& sb = sb_;
  const StepShapes& s = sb.shapes;
  const auto gi = static_cast<std::size_t>(group);
  const TensorId out = sb.graph.tensor(sb.group_name(group, "fsdp.all_gather_output"),
                                       summed(group, [&](int g) { return fsdp2::all_gather_output_bytes(s, g); }),
                                       Category::Params);
  const int o = sb.graph.op(sb.group_name(group, "fsdp.all_gather"), phase, sb.layer_of_group(group),
                            {sb.params[gi]}, {out},
                            {.workspace = summed(group, [&](int g) { return fsdp2::all_gather_workspace(s, g); })});
  // Each rank receives the other ranks' shards. FSDP2 issues a gather on its own stream and
  // the compute stream waits for it only at the copy-out: in backward it is prefetched a group
  // ahead, in forward the CPU issues it while the group before computes (implicit prefetch);
  // only the step's first gather (the embedding's) is waited for with nothing to hide behind.
  const std::int64_t elems = summed(group, [&](int g) { return fsdp2::padded_shard_elems(s, g); });
  sb.graph.set_comm(o, CommKind::AllGather, double((s.world - 1) * elems * s.e), static_cast<int>(s.world));
  sb.graph.set_comm_async(o, !(phase == Phase::Forward && group == embed_group(s)));
  if (!s.cpu) sb.graph.set_stream(o, kAllGatherStream);
  gathered_[gi] = out;
}

// foreach_all_gather_copy_out: the unsharded parameters from the gathered buffer; `frees`
// (the buffer a forward copy-out lets go of) is read last here.
void Fsdp2::copy_out(int group, Phase phase, TensorId frees) {
  StepBuild& sb = sb_;
  const auto gi = static_cast<std::size_t>(group);
  Ids outs;
  for (int g : members(group)) {
    unsharded_[static_cast<std::size_t>(g)] = sb.graph.tensor(
        sb.group_name(g, "fsdp.unsharded_params"), fsdp2::unsharded_bytes(sb.shapes, g), Category::Params);
    outs.push_back(unsharded_[static_cast<std::size_t>(g)]);
  }
  Ids reads = {gathered_[gi]};
  if (frees >= 0 && frees != gathered_[gi]) reads.push_back(frees);
  sb.graph.op(sb.group_name(group, "fsdp.copy_out"), phase, sb.layer_of_group(group), reads, outs);
}

void Fsdp2::unshard_forward(int group, Phase phase) {
  if (group == joined_) return;  // unsharded with the group it is joined to
  // The gather is issued in the group's pre-forward and waited for at once.
  prefetch(group, phase);
  copy_out(group, phase, forward_gathered_);
  forward_gathered_ = gathered_[static_cast<std::size_t>(group)];
}

void Fsdp2::reshard(int group, Phase phase) {
  if (group == joined_) return;
  Ids frees;
  for (int g : members(group)) {
    frees.push_back(unsharded_[static_cast<std::size_t>(g)]);
    unsharded_[static_cast<std::size_t>(g)] = -1;
  }
  sb_.graph.op(sb_.group_name(group, "fsdp.reshard"), phase, sb_.layer_of_group(group), frees, {});
}

void Fsdp2::end_forward() {
  sb_.graph.op(step_name("fsdp.root_post_forward"), Phase::Loss, -1, {forward_gathered_}, {});
  forward_gathered_ = -1;
}

void Fsdp2::copy_out_backward(int group) {
  if (group != joined_) copy_out(group, Phase::Backward, -1);
}

void Fsdp2::copy_out_recompute(int group) {
  copy_out(group, Phase::Backward, -1);
  forward_gathered_ = gathered_[static_cast<std::size_t>(group)];
}

void Fsdp2::end_recompute(int group) {
  sb_.graph.op(sb_.group_name(group, "fsdp.recompute_post_forward"), Phase::Backward, sb_.layer_of_group(group),
               {forward_gathered_}, {});
  forward_gathered_ = -1;
}

void Fsdp2::post_backward(int group) {
  if (group == joined_) return;
  StepBuild& sb = sb_;
  const StepShapes& s = sb.shapes;
  const int layer = sb.layer_of_group(group);
  reshard(group, Phase::Backward);
  if (reduce_input_ >= 0)
    sb.graph.op(sb.group_name(group, "fsdp.reduce_scatter_state.release"), Phase::Backward, layer, {reduce_input_}, {});
  const TensorId input = sb.graph.tensor(
      sb.group_name(group, "fsdp.reduce_scatter_input"),
      summed(group, [&](int g) { return fsdp2::reduce_scatter_input_bytes(s, g, reduce_e_); }), Category::Grads);
  Ids grads, shards;
  for (int g : members(group)) {
    for (TensorId t : sb.grads[static_cast<std::size_t>(g)]) grads.push_back(t);
    shards.push_back(sb.graph.tensor(sb.group_name(g, "grad.shard"), fsdp2::grad_shard_bytes(s, g), Category::Grads));
  }
  // The unsharded gradients are in param_dtype, the step's compute dtype.
  OpCost copy_in;
  if (s.cpu) {
    // The padded copies, all held until the cat, and beside them one cast temporary at a time.
    std::int64_t cast_temporary = 0;
    for (int g : members(group))
      cast_temporary = std::max(cast_temporary, fsdp2::reduce_copy_in_cast_bytes(s, g, s.e, reduce_e_));
    copy_in.workspace =
        summed(group, [&](int g) { return fsdp2::reduce_copy_in_padding_bytes(s, g, s.e); }) + cast_temporary;
  }
  sb.graph.op(sb.group_name(group, "fsdp.reduce_copy_in"), Phase::Backward, layer, grads, {input}, copy_in);
  // Below fp32 the reduce writes a [shard] in reduce_dtype, cast to the fp32 shard kept.
  const bool cast = reduce_e_ != 4;
  const std::int64_t reduced_bytes =
      summed(group, [&](int g) { return fsdp2::reduce_scatter_output_bytes(s, g, reduce_e_); });
  const Ids reduced =
      cast ? Ids{sb.graph.tensor(sb.group_name(group, "fsdp.reduce_output"), reduced_bytes, Category::Grads)} : shards;
  const int o = sb.graph.op(sb.group_name(group, "fsdp.reduce_scatter"), Phase::Backward, layer, {input}, reduced);
  // Each rank sends the other ranks' chunks, on FSDP2's reduce-scatter stream while the
  // backward goes on (the next reduce, or the optimizer, waits for it).
  const std::int64_t elems = summed(group, [&](int g) { return fsdp2::padded_shard_elems(s, g); });
  sb.graph.set_comm(o, CommKind::ReduceScatter, double((s.world - 1) * elems * reduce_e_), static_cast<int>(s.world));
  sb.graph.set_comm_async(o);
  if (!s.cpu) sb.graph.set_stream(o, kReduceScatterStream);
  if (cast) {
    const int c =
        sb.graph.op(sb.group_name(group, "fsdp.reduce_output.to_fp32"), Phase::Backward, layer, reduced, shards);
    if (!s.cpu) sb.graph.set_stream(c, kReduceScatterStream);
  }
  reduce_input_ = input;
  const int* shard = shards.begin();
  for (int g : members(group)) sb.grads[static_cast<std::size_t>(g)] = {*shard++};
}

void Fsdp2::end_backward() {
  if (reduce_input_ < 0) return;
  sb_.graph.op(step_name("fsdp.backward_final_callback"), Phase::Backward, -1, {reduce_input_}, {});
  reduce_input_ = -1;
}

}  // namespace longctx::step::blocks
