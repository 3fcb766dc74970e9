// torch.optim.AdamW's states and step (blocks/torch_adamw.h).
#include "planner/stacks/blocks/torch_adamw.h"

#include "planner/footprint/hf.h"
#include "planner/footprint/optimizer.h"
#include "planner/footprint/zero.h"

namespace longctx::step::blocks {

using namespace footprint;
using namespace footprint::hf;

namespace {

bool fused(const HfStep& sb) { return sb.in.train.stack.optimizer == HfOptimizer::AdamWTorchFused; }

}  // namespace

void adamw_model_states(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  sb.params.resize(static_cast<std::size_t>(param_groups(s)));
  for (int g = 0; g < param_groups(s); ++g) {
    sb.params[static_cast<std::size_t>(g)] =
        sb.graph.persistent(sb.group_name(g, "params"), group_params(s, g) * s.e, Category::Params, Place::Device);
    // exp_avg, exp_avg_sq [group_params] e and a scalar fp32 `step` per parameter tensor
    sb.graph.persistent(sb.group_name(g, "optim.state"), adamw_state_bytes(s, g, fused(sb)), Category::Optimizer,
                        Place::Device);
  }
  sb.grads.assign(static_cast<std::size_t>(param_groups(s)), Ids{});
}

void adamw_step(HfStep& sb, std::int64_t (*stepped_elems)(const StepShapes& s, int group)) {
  const StepShapes& s = sb.shapes;
  const int groups = param_groups(s);
  auto step_op = [&](Name name, Ids inputs, std::int64_t elems, std::int64_t workspace) {
    OpSpec o;
    o.name = name;
    o.kind = OpKind::Optimizer;
    o.phase = Phase::Optimizer;
    o.inputs = inputs;
    o.flops = adamw_flops(elems);
    o.memory_bytes = adamw_memory_bytes(s, elems);
    o.workspace_bytes = workspace;
    sb.graph.raw_op(std::move(o));
  };
  if (s.cpu && !fused(sb)) {
    for (int g = 0; g < groups; ++g)
      step_op(sb.group_name(g, "optim.step"), sb.grads[static_cast<std::size_t>(g)], group_params(s, g),
              adamw_single_tensor_workspace(s, g));
  } else {
    std::int64_t all = 0;
    for (int g = 0; g < groups; ++g) all += stepped_elems(s, g);
    // _fused_adamw: one kernel over every parameter, no temporaries; else _multi_tensor_adamw.
    step_op(step_name("optim.step"), {}, all, fused(sb) ? 0 : adamw_foreach_workspace(s));
  }
  for (int g = 0; g < groups; ++g)
    sb.graph.op(sb.group_name(g, "optim.zero_grad"), Phase::Optimizer, -1, sb.grads[static_cast<std::size_t>(g)], {});
  // The training loop holds its batch until the step returns: the Trainer's `inputs` through
  // optimizer.step(), torchtitan's train_step its `input_dict, labels`.
  for (const TensorId t : sb.model.batch) sb.graph.add_input(sb.graph.last_op(), t);
}

}  // namespace longctx::step::blocks
