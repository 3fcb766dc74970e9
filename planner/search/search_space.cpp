#include "planner/search/search_space.h"

#include <utility>

#include "planner/search/search.h"
#include "planner/stacks/stack_tiles.h"

namespace longctx {
namespace {

// The rows from `row` on, each candidate set in `p` in turn (a Plan is large: one is set and
// restored rather than one copied for every node of the tree); `p` is as it came on return.
void enumerate(Plan& p, std::size_t row, const TechniqueSet& allowed, const Knobs& fixed, std::vector<Plan>& out) {
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
  // The knobs' sections (knobs.h: ParallelConfig and TrainConfig) as they came, restored
  // whole: a knob's integer need not round-trip a hand-built value.
  const ParallelConfig parallel = p.parallel;
  const TrainConfig train = p.train;
  for (KnobValue v : values) {
    set_knob(p, k.id, v);
    enumerate(p, row + 1, allowed, fixed, out);
  }
  p.parallel = parallel;
  p.train = train;
}

}  // namespace

std::vector<Plan> coarse_choices(const Plan& base, const TechniqueSet& allowed, const Knobs& fixed) {
  std::vector<Plan> out;
  Plan p = base;
  enumerate(p, 0, allowed, fixed, out);
  return out;
}

FineOptions fine_options(const Plan& shape, const TechniqueSet& allowed, const Knobs& fixed) {
  FineOptions o;
  for (std::size_t i = 0; i < kFineKnobs; ++i) o[i] = knob_candidates(fine_knobs()[i], shape, allowed, fixed);
  return o;
}

FineValues plain_fine() {
  FineValues v{};
  for (std::size_t i = 0; i < kFineKnobs; ++i) v[i] = knob(fine_knobs()[i]).plain;
  return v;
}

Plan with_fine(Plan coarse, const FineValues& fine) {
  for (std::size_t i = 0; i < kFineKnobs; ++i) set_knob(coarse, fine_knobs()[i], fine[i]);
  return coarse;
}

bool valid(const Plan& p) { return validate(p).ok(); }

std::vector<Plan> search_space(const Plan& base, const TechniqueSet& allowed, const Knobs& fixed) {
  std::vector<Plan> out;
  for (const Plan& c : coarse_choices(base, allowed, fixed)) {
    Plan shape = with_fine(c, plain_fine());
    conform_to_stack(shape.model, shape.cluster.shape, shape.train, shape.parallel);
    if (!valid(shape)) continue;
    // Every combination of the fine rows' candidates, the last row innermost.
    std::vector<Plan> completed = {c};
    for (const KnobId id : fine_knobs()) {
      std::vector<Plan> next;
      for (const Plan& partial : completed)
        for (const KnobValue v : knob_candidates(id, shape, allowed, fixed)) {
          next.push_back(partial);
          set_knob(next.back(), id, v);
        }
      completed = std::move(next);
    }
    for (const Plan& p : completed)
      if (valid(p)) out.push_back(p);
  }
  return out;
}

}  // namespace longctx
