#pragma once
// Liger-Kernel's Llama kernels (v0.5.10, src/liger_kernel/ops/), which ArcticTraining's
// `liger` model patches into transformers (transformers/monkey_patch.py,
// apply_liger_kernel_to_llama): what each allocates beyond its outputs. Shapes: step_shapes.h.
// The ops that use them: planner/stacks/blocks/liger.cpp, planner/stacks/arctic/step.cpp.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint::liger {

// rms_norm.py rms_norm_backward: the per-SM partial weight gradients _dW [sm_count, width]
// fp32, their sum [width] fp32 and its cast to the weight's dtype [width] e (fp32: none).
// dX is written into dY in place (in_place=True): nothing else.
std::int64_t norm_backward_workspace(const StepShapes& s, std::int64_t width);

// fused_linear_cross_entropy.py fused_linear_cross_entropy_forward, over the rank's n tokens
// in `chunks` chunks of `rows` (chunk_size): held for the whole forward, loss_1d [n] fp32 and
// target_mask [n] bool; per chunk the logits [rows, V] e (overwritten by their gradient in
// place) and `grad_logits_chunk @ weight` [rows, h] e before it is copied into grad_input.
std::int64_t flce_forward_held_bytes(const StepShapes& s);
std::int64_t flce_chunk_workspace(const StepShapes& s, std::int64_t rows);

}  // namespace longctx::footprint::liger
