#pragma once
// longctx's own plans as a DeepSpeed config (`longctx export --stack deepspeed`), for a
// training script that runs DeepSpeed itself (docs/export.md).
#include "planner/stacks/exporter.h"

namespace longctx {

extern const StackExporter kDeepSpeedExporter;

}  // namespace longctx
