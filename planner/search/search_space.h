#pragma once
// The search's configurations, built from the knob table (knobs.h): the choices of the
// coarse knobs, each completed by the fine knobs (the rows marked `fine`: head chunk, MLP
// tiles, loss tiles) that search.h's monotonic bounds search inside it.
#include <array>
#include <vector>

#include "planner/core/knobs.h"
#include "planner/core/plan.h"

namespace longctx {

// Every choice of the coarse knobs, in table order (each row enumerated inside the ones
// above it), the fine knobs at their fixed or plain values; unvalidated.
std::vector<Plan> coarse_choices(const Plan& base, const TechniqueSet& allowed, const Knobs& fixed);

// A value for each fine row, in table order (fine_knobs()).
using FineValues = std::array<KnobValue, kFineKnobs>;
// The fine rows' candidates for a coarse choice, each fastest first, in table order: what the
// search nests inside it (search.cpp). `shape`: the choice with its fine rows at their fixed or
// plain values.
using FineOptions = std::array<std::vector<KnobValue>, kFineKnobs>;
FineOptions fine_options(const Plan& shape, const TechniqueSet& allowed, const Knobs& fixed);
// Every fine row at its plain value: the fastest (no chunking, no tiles).
FineValues plain_fine();
// The coarse choice with the given fine knobs.
Plan with_fine(Plan coarse, const FineValues& fine);

// validate() on the plan: a configuration the search may evaluate.
bool valid(const Plan& p);

}  // namespace longctx
