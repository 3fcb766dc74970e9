// ArcticTraining: DeepSpeed ZeRO-3 with its offloads, Ulysses, checkpointing and its offload,
// TiledMLP, and (the liger model) a chunked loss; no ZeRO-1/2 plans, no head chunks, no ring.
#include "planner/stacks/arctic/export.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/arctic/step.h"

namespace longctx {

extern const StackProfile kArcticProfile;
const StackProfile kArcticProfile = {
    .kind = StackKind::Arctic,
    .name = "arctic",
    .techniques =
        [](const StackSpec&) {
          TechniqueSet s = all_techniques();
          for (Technique t : {Technique::Zero1, Technique::Zero2, Technique::Untied, Technique::Ring})
            s.reset(static_cast<std::size_t>(t));
          return s;
        },
    .build_step = step::arctic::build_step,
    .exporter = &kArcticExporter,
};

}  // namespace longctx
