#pragma once
// The memory timeline of an evaluated plan as an SVG picture: device bytes stacked by
// category over the step's ops, host bytes below, phases shaded, budget and peak marked.
#include <string>

#include "planner/search/memory_model.h"

namespace longctx::cli {

std::string timeline_svg(const Evaluation& e);

}  // namespace longctx::cli
