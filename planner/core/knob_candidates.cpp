// The search's candidate values of each knob row, and the knobs as a user fixes them. Each
// value is held to its row's own rules here, one value at a time; the rules that span rows are
// validate()'s, applied once to each choice the candidates make (search_space.cpp).
#include <algorithm>

#include "planner/core/knobs.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/stack_tiles.h"

namespace longctx {
namespace {

bool requirement_met(const Plan& p, const Knob& k) {
  if (!k.rule.needs) return true;
  const Requirement& r = *k.rule.needs;
  const KnobValue other = knob_value(p, r.knob);
  return r.exactly ? other == r.value : other > knob(r.knob).plain;
}

// Whether row `id` may take v in p: the techniques and the row's own rule.
bool takes(const Plan& p, KnobId id, KnobValue v, const TechniqueSet& allowed) {
  const Knob& k = knob(id);
  return technique_allows(allowed, id, v) && (!k.rule.check || !k.rule.check(p, v, /*explain=*/false));
}

// Tile counts the search tries for n tokens per rank: 1, the powers of two that leave tiles
// of at least the smallest length, and the count that makes tiles of at most the smallest
// length (what max-context uses), capped at the bound on tiles. Tiles may be uneven
// (tile_split), so none needs to divide n.
std::vector<KnobValue> tile_options(std::int64_t n, std::int64_t min_tile, bool allowed) {
  std::vector<KnobValue> out = {1};
  if (!allowed) return out;
  for (std::int64_t t = 2; t <= n / min_tile && t <= limits::kMaxTiles; t *= 2) out.push_back(t);
  const std::int64_t finest = std::min((n + min_tile - 1) / min_tile, limits::kMaxTiles);
  if (finest > out.back()) out.push_back(finest);
  return out;
}

// A stack that picks its own count offers it (and untiled, where the stack may run so).
std::vector<KnobValue> tile_candidates(KnobId id, const Plan& p, bool any) {
  const bool loss = id == KnobId::loss_tiles;
  if (const auto own = stack_tile_count(p.model, p.train, p.parallel.ulysses, loss)) {
    if (loss && stack_always_tiles_loss(p.train)) return {*own};
    if (any && *own > 1) return {1, *own};
    return {1};
  }
  return tile_options(tokens_per_rank(p.train, p.parallel), min_tile_tokens(p.model), any);
}

// Head chunks: 0 (off) and every chunk the row takes, largest (fastest) first.
std::vector<KnobValue> chunk_candidates(const Plan& p, bool any) {
  std::vector<KnobValue> out = {0};
  if (!any) return out;
  for (std::int64_t c = p.model.heads / p.parallel.ulysses; c >= 1; --c)
    if (!knob_rules::head_chunk(p, c, /*explain=*/false)) out.push_back(c);
  return out;
}

// Ulysses degrees: every divisor of the GPUs the row takes (a degree divides the query heads
// too: no need to look past them on a large cluster).
std::vector<KnobValue> ulysses_candidates(const Plan& p, const TechniqueSet& allowed) {
  std::vector<KnobValue> out;
  const std::int64_t world = p.cluster.shape.world();
  for (std::int64_t u = 1; u <= std::min<std::int64_t>(world, p.model.heads); ++u)
    if (takes(p, KnobId::ulysses, u, allowed)) out.push_back(u);
  return out;
}

// Ring degrees beside the chosen Ulysses degree: 1 (no ring), and every r > 1 with u*r
// dividing the GPUs.
std::vector<KnobValue> ring_candidates(const Plan& p, const TechniqueSet& allowed) {
  std::vector<KnobValue> out = {1};
  const std::int64_t world = p.cluster.shape.world(), u = p.parallel.ulysses;
  for (std::int64_t r = 2; u * r <= world; ++r)
    if (takes(p, KnobId::ring, r, allowed)) out.push_back(r);
  return out;
}

}  // namespace

std::int64_t min_tile_tokens(const ModelConfig& m) {
  std::int64_t t = 1;
  while (t * 2 <= std::min<std::int64_t>(1024, m.hidden)) t *= 2;
  return t;
}

Plan with_knobs(Plan base, const Knobs& fixed) {
  for (const Knob& k : knob_table()) set_knob(base, k.id, fixed_value(fixed, k.id).value_or(k.plain));
  // A knob a given one needs at one value (--offload-params: zero3) is set to it; one it needs
  // only above plain (--ring-exchange: some ring; --offload-checkpoints: some checkpointing)
  // is a choice the request did not make, left plain for validate() to name.
  for (const Knob& k : knob_table())
    if (k.rule.needs && k.rule.needs->exactly && knob_value(base, k.id) > k.plain && !fixed_value(fixed, k.rule.needs->knob))
      set_knob(base, k.rule.needs->knob, k.rule.needs->value);
  // The knobs the stack decides (stack_tiles.h), unless fixed otherwise (validate() says why not).
  ParallelConfig conformed = base.parallel;
  conform_to_stack(base.model, base.cluster.shape, base.train, conformed);
  Plan decided = base;
  decided.parallel = conformed;
  for (const Knob& k : knob_table())
    if (!fixed_value(fixed, k.id)) set_knob(base, k.id, knob_value(decided, k.id));
  return base;
}

std::vector<KnobValue> knob_candidates(KnobId id, const Plan& p, const TechniqueSet& requested, const Knobs& fixed) {
  if (auto v = fixed_value(fixed, id)) return {*v};
  const Knob& k = knob(id);
  // No stack is offered what it cannot run.
  const TechniqueSet allowed = requested & stack_techniques(p);
  // Whether the row's technique is allowed at all (its values above the plain one).
  const bool any = technique_allows(allowed, id, k.plain + 1);
  switch (k.rule.candidates) {
    case Candidates::Ulysses: return ulysses_candidates(p, allowed);
    case Candidates::Ring: return ring_candidates(p, allowed);
    case Candidates::HeadChunk: return chunk_candidates(p, any);
    case Candidates::Tiles: return tile_candidates(id, p, any);
    case Candidates::Listed: break;
  }
  std::vector<KnobValue> out;
  const bool met = requirement_met(p, k);
  const auto& own = stack_profile(p.train.stack.kind).own_values;
  // A value only some stacks run (torchtitan's per-op checkpointing), offered to those alone:
  // validate() refuses it under any other, so a choice holding it could never be planned.
  auto stack_runs = [&](KnobValue v) {
    const auto& only = k.rule.stack_values;
    return std::find(only.begin(), only.end(), v) == only.end() ||
           std::find(own.begin(), own.end(), std::pair{id, v}) != own.end();
  };
  for (KnobValue v : k.rule.listed)
    if (v == k.plain || (met && technique_allows(allowed, id, v) && stack_runs(v))) out.push_back(v);
  return out;
}

}  // namespace longctx
