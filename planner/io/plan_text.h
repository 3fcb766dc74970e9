#pragma once
// A plan file's text into a Plan: the way every reader of plan text goes (read_plan_file,
// the Python package's plans), so that each gets the nesting bound before nlohmann::json
// copies anything recursively (common/json_depth.h).
#include <string>

#include "common/result.h"
#include "planner/core/plan.h"

namespace longctx {

// check_json_depth, the parse, then plan_from_json: every missing, wrong or unknown field
// named ("parallel.ulysses", "parallel.rnig"), the plan held to validate() with refusals that
// name the plan's keys. `what` names the text in errors (its path, or "plan").
// plan_from_json itself REQUIRES a value that nests at most kMaxJsonDepth levels.
Result<Plan> plan_from_text(const std::string& text, const std::string& what);

}  // namespace longctx
