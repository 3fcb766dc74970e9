#include "planner/core/phase_names.h"

#include <fmt/format.h>

namespace longctx {

std::string phase_name(StepPhase phase, std::int64_t layer) {
  switch (phase) {
    case StepPhase::Batch: return "batch";
    case StepPhase::ForwardEmbed: return "forward.embed";
    case StepPhase::ForwardLayer: return fmt::format("forward.layer.{}", layer);
    case StepPhase::Loss: return "loss";
    case StepPhase::BackwardLoss: return "backward.loss";
    case StepPhase::BackwardLayer: return fmt::format("backward.layer.{}", layer);
    case StepPhase::BackwardEmbed: return "backward.embed";
    case StepPhase::Optimizer: return "optimizer";
  }
  return "?";
}

}  // namespace longctx
