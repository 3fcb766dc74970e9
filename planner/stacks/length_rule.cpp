#include "planner/stacks/length_rule.h"

#include <fmt/format.h>

#include "planner/stacks/profile.h"

namespace longctx {

std::optional<std::int64_t> unmet_length_multiple(const Plan& p) {
  if (stack_profile(p.train.stack.kind).pads_sequence) return std::nullopt;
  const std::int64_t multiple = sequence_multiple(p.parallel);
  if (p.train.seq % multiple == 0) return std::nullopt;
  return multiple;
}

std::string length_rule(const std::string& pieces) {
  return fmt::format("cuts each sample into {} equal pieces and pads nothing", pieces);
}

}  // namespace longctx
