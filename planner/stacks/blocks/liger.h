#pragma once
// Liger-Kernel's ops (v0.5.10, src/liger_kernel/ops/rms_norm.py, rope.py, swiglu.py) in
// transformers' decoder layer, as the arctic stack's liger model runs them: kLigerOps is
// transformers' layer with Liger's RMSNorm, RoPE and SwiGLU MLP. Footprints: footprint/liger.h.
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

extern const LayerOps kLigerOps;

}  // namespace longctx::step::blocks
