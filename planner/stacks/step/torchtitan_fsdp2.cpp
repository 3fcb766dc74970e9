// FSDP2 as torchtitan applies it (models/llama3/infra/parallelize.py, apply_fsdp), written
// into the torchtitan step: per parameter group (the embedding, each block, [norm, output])
// the all-gather, its copy-out into unsharded parameters, the reshard, and the reduce-scatter
// of the gradients, with the lifetimes torch 2.11's FSDPParamGroup gives their buffers
// (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: wait_for_unshard keeps a forward
// all-gather's output as all_gather_state until the next group's copy-out, frees a backward
// one at its own; post_backward keeps the reduce-scatter input as reduce_scatter_state until
// the next reduce; the root's post-forward and backward's final callback free the last of
// each). Footprints: footprint/fsdp2.h.
#include "planner/stacks/step/hf_step.h"

#include "planner/footprint/fsdp2.h"
#include "planner/footprint/zero.h"

namespace longctx::step::hf {

using namespace footprint;

namespace {
// On CUDA FSDP2 allocates a gather's buffers on its all-gather copy-in stream and a
// reduce-scatter's output on its reduce-scatter stream; their freed blocks stay with those
// streams (the reserved replay keeps a pool per stream).
constexpr int kAllGatherStream = 1, kReduceScatterStream = 2;

}  // namespace

// On one rank torchtitan applies no FSDP (its dp_shard degree is 1): nothing to shard.
bool fsdp2(const HfStep& sb) {
  return torchtitan(sb) && sb.parallel.sharding == Sharding::Zero3 && sb.shapes.world > 1;
}

// The sharded parameters [shard] fp32 and fused AdamW's state on them, per group.
void fsdp2_model_states(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  const int groups = param_groups(s);
  sb.params.resize(static_cast<std::size_t>(groups));
  sb.fsdp2.gathered.assign(static_cast<std::size_t>(groups), -1);
  sb.fsdp2.unsharded.assign(static_cast<std::size_t>(groups), -1);
  for (int g = 0; g < groups; ++g) {
    sb.params[static_cast<std::size_t>(g)] =
        sb.graph.persistent(sb.group_name(g, "params.shard"), fsdp2::shard_bytes(s, g), Category::Params, Place::Device);
    sb.graph.persistent(sb.group_name(g, "optim.state"), fsdp2::adamw_state_bytes(s, g), Category::Optimizer,
                        Place::Device);
  }
  sb.grads.assign(static_cast<std::size_t>(groups), Ids{});
}

void fsdp2_prefetch(HfStep& sb, int group, Phase phase) {
  const StepShapes& s = sb.shapes;
  const auto gi = static_cast<std::size_t>(group);
  const TensorId out = sb.graph.tensor(sb.group_name(group, "fsdp.all_gather_output"),
                                       fsdp2::all_gather_output_bytes(s, group), Category::Params);
  const int o = sb.graph.op(sb.group_name(group, "fsdp.all_gather"), phase, sb.layer_of_group(group),
                            {sb.params[gi]}, {out}, {.workspace = fsdp2::all_gather_workspace(s, group)});
  // Each rank receives the other ranks' shards. FSDP2 issues a gather on its own stream and
  // the compute stream waits for it only at the copy-out: in backward it is prefetched a group
  // ahead, in forward the CPU issues it while the group before computes (implicit prefetch);
  // only the step's first gather (the embedding's) is waited for with nothing to hide behind.
  sb.graph.set_comm(o, CommKind::AllGather, double((s.world - 1) * fsdp2::padded_shard_elems(s, group) * s.e),
                    static_cast<int>(s.world));
  sb.graph.set_comm_async(o, !(phase == Phase::Forward && group == embed_group(s)));
  if (!s.cpu) sb.graph.set_stream(o, kAllGatherStream);
  sb.fsdp2.gathered[gi] = out;
}

namespace {
// foreach_all_gather_copy_out: the unsharded parameters from the gathered buffer; `frees`
// (the buffer a forward copy-out lets go of) is read last here.
void copy_out(HfStep& sb, int group, Phase phase, TensorId frees) {
  const StepShapes& s = sb.shapes;
  const auto gi = static_cast<std::size_t>(group);
  sb.fsdp2.unsharded[gi] =
      sb.graph.tensor(sb.group_name(group, "fsdp.unsharded_params"), fsdp2::unsharded_bytes(s, group), Category::Params);
  Ids reads = {sb.fsdp2.gathered[gi]};
  if (frees >= 0 && frees != sb.fsdp2.gathered[gi]) reads.push_back(frees);
  sb.graph.op(sb.group_name(group, "fsdp.copy_out"), phase, sb.layer_of_group(group), reads, {sb.fsdp2.unsharded[gi]});
}
}  // namespace

void fsdp2_unshard_forward(HfStep& sb, int group, Phase phase) {
  // The gather is issued in the group's pre-forward and waited for at once.
  fsdp2_prefetch(sb, group, phase);
  copy_out(sb, group, phase, sb.fsdp2.forward_gathered);
  sb.fsdp2.forward_gathered = sb.fsdp2.gathered[static_cast<std::size_t>(group)];
}

void fsdp2_reshard(HfStep& sb, int group, Phase phase) {
  const auto gi = static_cast<std::size_t>(group);
  sb.graph.op(sb.group_name(group, "fsdp.reshard"), phase, sb.layer_of_group(group), {sb.fsdp2.unsharded[gi]}, {});
  sb.fsdp2.unsharded[gi] = -1;
}

void fsdp2_end_forward(HfStep& sb) {
  sb.graph.op(step_name("fsdp.root_post_forward"), Phase::Loss, -1, {sb.fsdp2.forward_gathered}, {});
  sb.fsdp2.forward_gathered = -1;
}

void fsdp2_copy_out_backward(HfStep& sb, int group) { copy_out(sb, group, Phase::Backward, -1); }

void fsdp2_post_backward(HfStep& sb, int group) {
  const StepShapes& s = sb.shapes;
  const auto gi = static_cast<std::size_t>(group);
  const int layer = sb.layer_of_group(group);
  fsdp2_reshard(sb, group, Phase::Backward);
  if (sb.fsdp2.reduce_input >= 0)
    sb.graph.op(sb.group_name(group, "fsdp.reduce_scatter_state.release"), Phase::Backward, layer,
                {sb.fsdp2.reduce_input}, {});
  const TensorId input = sb.graph.tensor(sb.group_name(group, "fsdp.reduce_scatter_input"),
                                         fsdp2::reduce_scatter_input_bytes(s, group), Category::Grads);
  sb.graph.op(sb.group_name(group, "fsdp.reduce_copy_in"), Phase::Backward, layer, sb.grads[gi], {input});
  const TensorId shard =
      sb.graph.tensor(sb.group_name(group, "grad.shard"), fsdp2::grad_shard_bytes(s, group), Category::Grads);
  const int o = sb.graph.op(sb.group_name(group, "fsdp.reduce_scatter"), Phase::Backward, layer, {input}, {shard});
  // Each rank sends the other ranks' chunks, on FSDP2's reduce-scatter stream while the
  // backward goes on (the next reduce, or the optimizer, waits for it).
  sb.graph.set_comm(o, CommKind::ReduceScatter, double((s.world - 1) * fsdp2::padded_shard_elems(s, group) * 4),
                    static_cast<int>(s.world));
  sb.graph.set_comm_async(o);
  if (!s.cpu) sb.graph.set_stream(o, kReduceScatterStream);
  sb.fsdp2.reduce_input = input;
  sb.grads[gi] = {shard};
}

void fsdp2_end_backward(HfStep& sb) {
  if (sb.fsdp2.reduce_input < 0) return;
  sb.graph.op(step_name("fsdp.backward_final_callback"), Phase::Backward, -1, {sb.fsdp2.reduce_input}, {});
  sb.fsdp2.reduce_input = -1;
}

}  // namespace longctx::step::hf
