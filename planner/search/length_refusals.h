#pragma once
// The choices the search skipped only because their stack's length rule refuses --seq
// (planner/stacks/length_rule.h: a stack that pads nothing takes only lengths its layout cuts
// evenly). When no plan fits, the refusal names them, the rule, and a length near --seq at
// which they would be tried: the plans that might fit were never evaluated.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/core/plan.h"

namespace longctx {

class LengthRefusals {
 public:
  // Notes the choice c, which validate() refused, when the length rule alone refused it: c at
  // the nearest length that meets the rule (nearby_length) is valid.
  void note(const Plan& c);
  // "" when nothing was noted; else what was not tried and why, and the fix: "the plans with
  // --ring 2, 4 or 8 were not tried: --stack torchtitan cuts each sample into 4, 8 or 16 equal
  // pieces and pads nothing, which --seq 1000001 does not meet: give a --seq divisible by 16,
  // such as 1000000, to try them".
  std::string explain() const;

 private:
  struct Layout {
    int ulysses = 1;
    int ring = 1;
    std::int64_t multiple = 1;  // sequence_multiple: the pieces each sample is cut into
    bool operator==(const Layout&) const = default;
  };
  std::vector<Layout> refused_;  // distinct, in the order noted
  std::int64_t seq_ = 0;
  std::string stack_;
};

// The multiple of `multiple` nearest below seq, or `multiple` itself when seq is smaller.
// REQUIRES: multiple >= 1.
std::int64_t nearby_length(std::int64_t seq, std::int64_t multiple);

}  // namespace longctx
