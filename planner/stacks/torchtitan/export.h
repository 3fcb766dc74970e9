#pragma once
// A plan as a torchtitan job file (`longctx export --stack torchtitan`, docs/export.md).
#include <string>

#include "planner/stacks/exporter.h"

namespace longctx {

extern const StackExporter kTorchtitanExporter;

inline constexpr const char* kTorchtitanJobFile = "torchtitan_job.toml";

// torchtitan's job config (torchtitan 0.2.2 config/job_config.py JobConfig) as JSON tables.
StackConfig torchtitan_job(const Plan& p);
// torchtitan's model for the plan's: "qwen3" for a model with q/k norms, else "llama3".
const char* torchtitan_model_name(const ModelConfig& m);
// Its flavor (models/llama3/__init__.py llama3_args: "debugmodel", "8B", "70B", "405B";
// models/qwen3/__init__.py qwen3_args: "0.6B" to "32B" and "debugmodel"), matched by every
// shape its model arguments set, or empty when none has the plan's shape.
std::string torchtitan_flavor(const ModelConfig& m);

}  // namespace longctx
