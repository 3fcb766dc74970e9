#pragma once
// The keys a plan file may hold, section by section: what longctx writes there (plan_to_json)
// and what its readers take (a model section also takes the config.json spellings
// model_from_json reads). An edited plan whose key is misspelt (`parallel.rnig`) would
// otherwise plan with that knob at its default, silently: such a key is refused by name.
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "planner/core/plan.h"

namespace longctx {

// REQUIRES: j is a plan file's top-level object, and `p` the plan read from it (its stack
// says which train.stack options exist). BadInput naming the first unknown key
// ("parallel.rnig") and the keys that section takes.
Result<bool> refuse_unknown_plan_keys(const nlohmann::json& j, const Plan& p);

}  // namespace longctx
