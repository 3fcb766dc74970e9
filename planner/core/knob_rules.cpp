// The rules of one knob row in the context of the rows above it (knobs.h, KnobRule::check):
// what validate() applies to a plan's value and the search to each candidate value.
#include <utility>

#include <fmt/format.h>

#include "planner/core/knobs.h"

namespace longctx::knob_rules {
namespace {

// A refusal, its message written only where it is asked for.
template <class... Args>
Refusal refuse(bool explain, fmt::format_string<Args...> message, Args&&... args) {
  if (!explain) return std::string();
  return fmt::format(message, std::forward<Args>(args)...);
}

}  // namespace

// u ranks share each sample's heads: u divides the GPUs, the query heads, and the kv heads
// or is a multiple of them (kv heads replicated u/kv times).
Refusal ulysses(const Plan& p, KnobValue u, bool explain) {
  const ModelConfig& m = p.model;
  const std::int64_t world = p.cluster.shape.world();
  if (world % u != 0) return refuse(explain, "{} does not divide the {} GPUs (world = dp x ulysses)", u, world);
  if (m.heads % u != 0) return refuse(explain, "{} does not divide the {} query heads (rule: q_heads % u == 0)", u, m.heads);
  if (m.kv_heads % u != 0 && u % m.kv_heads != 0)
    return refuse(explain,
                  "{} and the {} kv heads divide neither way (rule: kv % u == 0, or u % kv == 0 with kv heads "
                  "replicated u/kv times)",
                  u, m.kv_heads);
  return std::nullopt;
}

// r groups of u ranks share a sample.
Refusal ring(const Plan& p, KnobValue r, bool explain) {
  const std::int64_t u = p.parallel.ulysses, world = p.cluster.shape.world();
  if (world % (u * r) != 0)
    return refuse(explain, "{} x ulysses {} does not divide the {} GPUs (world = dp x ring x ulysses)", r, u, world);
  return std::nullopt;
}

// Untied Ulysses stages of c of a rank's q_heads/u heads: c divides them, and divides or is a
// multiple of the query heads that share a kv head on the rank. The head-chunked projection
// (runtime/src/attention.cpp) has no q/k/v bias.
Refusal head_chunk(const Plan& p, KnobValue c, bool explain) {
  const ModelConfig& m = p.model;
  const std::int64_t local_heads = m.heads / p.parallel.ulysses;
  if (c == 0) return std::nullopt;
  if (c > local_heads) return refuse(explain, "{} is outside 1..{} (q_heads/u); 0 turns head chunking off", c, local_heads);
  const std::int64_t group = local_heads / kv_heads_per_rank(m, p.parallel.ulysses);  // q heads per kv head on a rank
  if (local_heads % c != 0) return refuse(explain, "{} does not divide the {} heads per rank (q_heads/u)", c, local_heads);
  if (group % c != 0 && c % group != 0)
    return refuse(explain, "{} neither divides nor is a multiple of the {} query heads that share a kv head on a rank",
                  c, group);
  if (m.qkv_bias) return refuse(explain, "not available for a model with q/k/v biases (attention_bias, qwen2); use 0");
  return std::nullopt;
}

// Tiles may be uneven (tile_split), but each needs a row: at most the tokens per rank.
Refusal tiles(const Plan& p, KnobValue t, bool explain) {
  const std::int64_t tokens = tokens_per_rank(p.train, p.parallel);
  if (t > tokens) return refuse(explain, "{} must be between 1 and the {} tokens per rank", t, tokens);
  return std::nullopt;
}

}  // namespace longctx::knob_rules
