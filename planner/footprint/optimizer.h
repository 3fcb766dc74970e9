#pragma once
// AdamW's per-parameter temporaries, on the device or, offloaded, on the host. Shapes:
// step_shapes.h.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// Scratch of a step that walks a group parameter by parameter (param_sizes order), needing
// temp_bytes_per_elem x elems for each and releasing freed_bytes_per_elem x elems (its
// gradient) after it: the most it holds beyond what the group held at the start.
std::int64_t per_param_peak(const StepShapes& s, int group, std::int64_t temp_bytes_per_elem,
                            std::int64_t freed_bytes_per_elem);

// optim.step on the device (runtime/src/llama_step.cpp, AdamW::step and AdamW::update): the
// update's fp32 temporary denom = sqrt(v)/sqrt(bc2) + eps [elems] x 4, and gradients other
// than fp32 first upcast, g_fp32 [elems] x 4. A flat shard (`whole` false) is updated at
// once; whole parameters (unsharded gradients, or one rank) one at a time, each gradient
// released once its parameter is updated.
std::int64_t adamw_device_workspace(const StepShapes& s, int group, std::int64_t elems, bool whole);

// optim.step on the host (offload-optimizer): beside the persistent fp32 gradient buffers
// (offload.h, host_grad_bytes), denom [elems] x 4, and for fp32 parameters (their own
// master) a host copy host_p [elems] x 4 updated and copied back. Whole parameters one at a
// time, as on the device; no gradient is released (the buffers stay for the next step).
std::int64_t adamw_host_workspace(const StepShapes& s, int group, std::int64_t elems, bool whole);

// Bytes the update moves over memory: the states (master when present, exp_avg, exp_avg_sq)
// and the gradient, fp32, read and written: one fused pass (torch's fused AdamW, DeepSpeed's
// CPU Adam).
double adamw_memory_bytes(const StepShapes& s, std::int64_t elems);

// The same for longctx's runtime, whose AdamW::update (runtime/src/adamw.cpp) is eight
// elementwise passes over fp32 rows: lerp_ of exp_avg (reads it and the gradient, writes it:
// 12 B), exp_avg_sq's mul_ (8) and addcmul_ (12), the denominator's sqrt_out, div_ and add_
// (8 each), the target's decay mul_ (8) and addcdiv_ (16): 80 B an element. On the device a
// bf16 parameter adds its gradient's upcast (6) and the copy back from the master (6).
// Measured on an H100's host (16 cores): 10.4 s for Llama-3.2-3B's 3.2 B parameters, about
// 25 GB/s of these bytes.
double runtime_adamw_memory_bytes(const StepShapes& s, std::int64_t elems, bool on_host);

// 12 flops an element.
inline double adamw_flops(std::int64_t elems) { return 12.0 * double(elems); }

}  // namespace longctx::footprint
