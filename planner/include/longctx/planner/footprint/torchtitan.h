#pragma once
// The torchtitan stack (stack.h): what torchtitan's Llama 3 model (0.2.2,
// models/llama3/model/model.py) allocates beyond its ops' outputs where it differs from
// transformers' (footprint/hf.h, whose layer it otherwise shares). Shapes: step_shapes.h;
// figures per rank, e bytes an element of the model's dtype. The ops that use them:
// planner/src/step/hf_layer.cpp and hf_model.cpp, under torchtitan(sb).
#include <cstdint>

#include "longctx/planner/footprint/step_shapes.h"

namespace longctx::footprint::torchtitan {

// Transformer.__init__ registers freqs_cis = precompute_freqs_cis(d, max_seq_len): [S, d/2]
// complex64, 8 bytes an element, on the model's device for the whole run.
std::int64_t freqs_cis_bytes(const StepShapes& s);

// qwen3's model (models/qwen3/model/model.py) registers rope_cache = [cos | sin] [S, 2d] fp32
// instead, passed to every block. Under FSDP2 with a bf16 param_dtype each block's pre-forward
// casts its floating-point inputs (MixedPrecisionPolicy.cast_forward_inputs), rope_cache among
// them: [S, 2d] e a block (rope_cache_cast_bytes), which apply_rotary_emb's slices view and
// its products save; a checkpointed block keeps it as its input until its backward.
std::int64_t rope_cache_bytes(const StepShapes& s);
std::int64_t rope_cache_cast_bytes(const StepShapes& s);

// apply_rotary_emb on q or k of `heads` heads: view_as_complex(x.float()) * freqs_cis, a
// complex64 [n, heads, d/2] product, viewed back as [n, heads*d] fp32 and cast with
// type_as. In fp32 the product is the output and nothing else is made. In bf16 the input's
// fp32 copy (a separate tensor: the function's local lives until it returns) and the
// product beside the cast output: this is the product.
std::int64_t rope_forward_workspace(const StepShapes& s, std::int64_t heads);

// Its backward (MulBackward0 of the complex product): grad * freqs_cis.conj(), where the
// conjugate of the [S, d/2] slice is materialized (resolve_conj) for the product, S·d/2·8
// bytes; in bf16 also the gradient's fp32 copy (ToCopyBackward0 of type_as) and the complex
// product before the cast back (ToCopyBackward0 of x.float()).
std::int64_t rope_backward_workspace(const StepShapes& s, std::int64_t heads);

}  // namespace longctx::footprint::torchtitan
