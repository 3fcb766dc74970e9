// `longctx export --stack deepspeed`: the DeepSpeed config of a longctx plan
// (blocks/deepspeed_config.h), and what a bare DeepSpeed config cannot run.
#include "planner/stacks/longctx/export.h"

#include "planner/stacks/blocks/deepspeed_config.h"

namespace longctx {

namespace {

constexpr ExportRefusal kRefusals[] = {
    kUlyssesRingRefusal,
    kHeadChunkRefusal,
    kMlpTilesRefusal,
    kStageZeroOffloadRefusal,
    {"parallel.loss_tiles", [](const Plan& p) { return p.parallel.loss_tiles > 1; },
     "tile the loss (a DeepSpeed config has no loss setting): full logits hold more than the plan predicts",
     "use --stack arctic or --stack hf (Liger's fused cross-entropy) or re-plan with --loss-tiles 1"},
};

Result<bool> check(const Plan& p) { return first_refusal(p, "deepspeed", kRefusals); }

StackFiles write(const Plan& p) {
  StackConfig ds = deepspeed_config(p, DeepSpeedLauncher::Script);
  return {.files = {{kDeepSpeedConfigFile, ExportFile::Format::Json, std::move(ds.value), {}}},
          .approximations = std::move(ds.approximations)};
}

}  // namespace

const StackExporter kDeepSpeedExporter = {
    .word = "deepspeed",
    .plans_predict = nullptr,  // longctx's plans run on longctx's runtime: any stack may run them
    .check = check,
    .write = write,
};

}  // namespace longctx
