#pragma once
// The search's configurations, built from the knob table (knobs.h): the choices of the
// coarse knobs, each completed by the fine knobs (head chunk, MLP tiles, loss tiles) that
// search.h's monotonic bounds search inside it.
#include <vector>

#include "planner/core/knobs.h"
#include "planner/core/plan.h"

namespace longctx {

// Every choice of the coarse knobs, in table order (each row enumerated inside the ones
// above it), the fine knobs at their fixed or plain values; unvalidated.
std::vector<Plan> coarse_choices(const Plan& base, const TechniqueSet& allowed, const Knobs& fixed);

// The coarse choice with the given fine knobs.
Plan with_fine(Plan coarse, KnobValue head_chunk, KnobValue mlp_tiles, KnobValue loss_tiles);

bool valid(const Plan& p);

}  // namespace longctx
