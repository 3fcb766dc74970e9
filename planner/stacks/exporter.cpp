// What every stack's export writer shares (planner/stacks/exporter.h).
#include "planner/stacks/exporter.h"

#include <fmt/format.h>

namespace longctx {

Result<bool> first_refusal(const Plan& p, const char* word, std::span<const ExportRefusal> refusals) {
  for (const ExportRefusal& r : refusals)
    if (r.applies(p)) return Error::bad_input(r.knob, fmt::format("--stack {} cannot {}; {}", word, r.why, r.fix));
  return true;
}

std::string export_header(const Plan& p, const char* word) {
  return fmt::format("longctx export --stack {}: model {}, seq {}, {} rank(s)", word, p.model.name, p.train.seq,
                     p.cluster.shape.world());
}

const char* dtype_name(DType t) { return t == DType::BF16 ? "bf16" : "fp32"; }

void add_checkpoint_notes(const Plan& p, const char* how, std::vector<std::string>& notes) {
  const CheckpointPolicy& c = p.parallel.checkpoint;
  if (c.kind != CheckpointPolicy::Kind::EveryK) return;
  notes.push_back(fmt::format("parallel.checkpoint: {} checkpoints every layer, not {}: less device memory than planned, "
                              "more recompute",
                              how, to_string(c)));
}

}  // namespace longctx
