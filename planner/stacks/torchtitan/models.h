#pragma once
// Which model shapes torchtitan (0.2.2) trains, in one place for the stack's validation
// (validate.cpp) and its export (export.cpp): its llama3 model (models/llama3: no
// biases, no q/k norms, untied embedding and output, heads hidden / heads wide) or, for a
// model with q/k norms, its qwen3 model (models/qwen3: any head_dim, tied or not; no biases).
// Across GPUs a tied model is not taken: torchtitan's apply_fsdp would shard the one weight in
// the embedding's group and again under [norm, output], and how FSDP2 resolves it is not
// modelled.
#include <cstdint>
#include <optional>
#include <string>

#include "planner/core/model_config.h"

namespace longctx {

struct TorchtitanModelRefusal {
  bool about_gpus = false;  // the model runs on one GPU, not on `world`
  std::string reason;       // completes "--stack torchtitan ..."
};

// nullopt when torchtitan runs model m on `world` ranks.
std::optional<TorchtitanModelRefusal> torchtitan_model_refusal(const ModelConfig& m, std::int64_t world);

}  // namespace longctx
