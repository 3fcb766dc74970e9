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
// Every fine row at its plain value: the fastest (no chunking, no tiles).
FineValues plain_fine();
// The coarse choice with the given fine knobs.
Plan with_fine(Plan coarse, const FineValues& fine);

// validate() on the plan: a configuration the search may evaluate.
bool valid(const Plan& p);

}  // namespace longctx
