#pragma once
// The length rule of a stack that pads nothing (StackProfile::pads_sequence false): its
// sequence layout cuts each sample into sequence_multiple() equal pieces (parallel_config.h),
// so it takes only lengths divisible by that. validate() refuses the others; the search names
// the rule when the plans it refused are why nothing fits (planner/search/length_refusals.h).
#include <cstdint>
#include <optional>
#include <string>

#include "planner/core/plan.h"

namespace longctx {

// The multiple p.train.seq must be and is not, under p's stack and sequence layout; nullopt
// when p meets the rule or its stack pads.
std::optional<std::int64_t> unmet_length_multiple(const Plan& p);

// The rule as refusals state it: "cuts each sample into 16 equal pieces and pads nothing".
std::string length_rule(const std::string& pieces);

}  // namespace longctx
