#pragma once
// The names of a training step's phases, formatted in one place: the planner predicts peaks
// under them (phase_peaks.h), the runtime measures under them (llama_step.cpp, runner.cpp),
// the trace records them and `compare` matches the two by name.
#include <cstdint>
#include <string>

namespace longctx {

enum class StepPhase {
  Batch,          // the runtime makes the step's tokens (no planner ops)
  ForwardEmbed,   // "forward.embed"
  ForwardLayer,   // "forward.layer.L"
  Loss,           // "loss": the final norm, output projection and cross-entropy
  BackwardLoss,   // "backward.loss"
  BackwardLayer,  // "backward.layer.L"
  BackwardEmbed,  // "backward.embed"
  Optimizer,      // "optimizer": gradient reduction and the AdamW step
};

// REQUIRES: layer >= 0 for ForwardLayer and BackwardLayer; ignored otherwise.
std::string phase_name(StepPhase phase, std::int64_t layer = -1);

}  // namespace longctx
