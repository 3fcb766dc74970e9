#pragma once
// Human-readable rendering of an evaluated plan: the summary, the breakdown at the peak,
// the live set there, and a memory timeline.
#include <string>

#include "planner/search/memory_model.h"

namespace longctx::cli {

std::string render_plan(const Evaluation& e, int live_rows = 12);

// One line: the padding the Ulysses layout adds to each sample (parallel_config.h,
// padded_seq), or that there is none, and the tokens each rank then holds.
std::string render_padding(const Plan& p);

}  // namespace longctx::cli
