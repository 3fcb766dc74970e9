#include "planner/stacks/torchtitan/models.h"

#include <fmt/format.h>

namespace longctx {

std::optional<TorchtitanModelRefusal> torchtitan_model_refusal(const ModelConfig& m, std::int64_t world) {
  if (m.qkv_bias || m.o_bias || m.mlp_bias)
    return TorchtitanModelRefusal{false, "runs torchtitan's llama3 and qwen3 models, which have no biases: pick a model "
                                         "without them"};
  if (!m.qk_norm && m.tie_embeddings)
    return TorchtitanModelRefusal{false, "runs torchtitan's llama3 model for a model without q/k norms, whose embedding "
                                         "and output are not tied"};
  if (!m.qk_norm && m.head_dim * m.heads != m.hidden)
    return TorchtitanModelRefusal{false, fmt::format("runs torchtitan's llama3 model for a model without q/k norms, whose "
                                                     "heads are hidden / heads = {} wide, not {}",
                                                     m.hidden / m.heads, m.head_dim)};
  if (m.tie_embeddings && world > 1)
    return TorchtitanModelRefusal{true, "shards a model with tied embeddings across GPUs in a way not modelled: give "
                                        "--gpus 1"};
  return std::nullopt;
}

}  // namespace longctx
