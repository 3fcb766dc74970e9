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

// A line's text where a GPU plan's --budget is above its device's memory ("96.00 GiB is above
// h100-80gb's 79.65 GiB ..."): a what-if the planner answers, for a device that does not
// exist, which the answer says rather than reading as a plan for the GPU named; empty
// otherwise (and on the CPU virtual device, whose budget is its memory).
std::string budget_note(const Plan& p);

}  // namespace longctx::cli
