#include "planner/search/search_space.h"

#include "planner/search/search.h"
#include "planner/stacks/stack_tiles.h"

namespace longctx {
namespace {

void enumerate(const Plan& p, std::size_t row, const TechniqueSet& allowed, const Knobs& fixed, std::vector<Plan>& out) {
  const auto& table = knob_table();
  if (row == table.size()) {
    out.push_back(p);
    return;
  }
  const Knob& k = table[row];
  // A fine row takes its first candidate: its fixed value, the plain one, or the one value a
  // stack allows (stack_tiles.h).
  std::vector<KnobValue> values = knob_candidates(k.id, p, allowed, fixed);
  if (k.rule.fine) values.resize(1);
  for (KnobValue v : values) {
    Plan next = p;
    set_knob(next, k.id, v);
    enumerate(next, row + 1, allowed, fixed, out);
  }
}

}  // namespace

std::vector<Plan> coarse_choices(const Plan& base, const TechniqueSet& allowed, const Knobs& fixed) {
  std::vector<Plan> out;
  enumerate(base, 0, allowed, fixed, out);
  return out;
}

Plan with_fine(Plan coarse, KnobValue head_chunk, KnobValue mlp_tiles, KnobValue loss_tiles) {
  set_knob(coarse, KnobId::head_chunk, head_chunk);
  set_knob(coarse, KnobId::mlp_tiles, mlp_tiles);
  set_knob(coarse, KnobId::loss_tiles, loss_tiles);
  return coarse;
}

bool valid(const Plan& p) { return validate(p.model, p.cluster.shape, p.train, p.parallel).ok(); }

std::vector<Plan> search_space(const Plan& base, const TechniqueSet& allowed, const Knobs& fixed) {
  std::vector<Plan> out;
  for (const Plan& c : coarse_choices(base, allowed, fixed)) {
    Plan shape = with_fine(c, 0, 1, 1);
    conform_to_stack(shape.model, shape.cluster.shape, shape.train, shape.parallel);
    if (!valid(shape)) continue;
    const auto chunks = knob_candidates(KnobId::head_chunk, shape, allowed, fixed);
    const auto mlps = knob_candidates(KnobId::mlp_tiles, shape, allowed, fixed);
    const auto losses = knob_candidates(KnobId::loss_tiles, shape, allowed, fixed);
    for (KnobValue chunk : chunks)
      for (KnobValue mlp : mlps)
        for (KnobValue loss : losses) {
          Plan p = with_fine(c, chunk, mlp, loss);
          if (valid(p)) out.push_back(p);
        }
  }
  return out;
}

}  // namespace longctx
