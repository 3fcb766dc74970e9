#pragma once
// torch's RMSNorm (nn.RMSNorm -> aten::rms_norm -> _fused_rms_norm), as torchtitan's models
// run it in place of LlamaRMSNorm. Footprints: footprint/hf.h.
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

NormActs torch_norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc);
TensorId torch_norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                             Ids& grads);

}  // namespace longctx::step::blocks
