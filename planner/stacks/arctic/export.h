#pragma once
// A plan as an ArcticTraining recipe (`longctx export --stack arctic`, docs/export.md).
#include "planner/stacks/exporter.h"

namespace longctx {

extern const StackExporter kArcticExporter;

inline constexpr const char* kArcticRecipeFile = "arctic_recipe.yaml";

// The ArcticTraining recipe (arctic_training/config/trainer.py TrainerConfig) as JSON.
StackConfig arctic_recipe(const Plan& p);

}  // namespace longctx
