// `longctx export --stack deepspeed`: the DeepSpeed config of a longctx plan
// (blocks/deepspeed_config.h), and what a bare DeepSpeed config cannot run.
#include "planner/stacks/longctx/export.h"

#include "planner/stacks/blocks/deepspeed_config.h"
#include "planner/stacks/launch_script.h"

namespace longctx {

namespace {

constexpr ExportRefusal kRefusals[] = {
    kUlyssesRingRefusal,
    kHeadChunkRefusal,
    kMlpTilesRefusal,
    kStageZeroOffloadRefusal,
    kStageZeroGradDtypeRefusal,
    {"parallel.loss_tiles", [](const Plan& p) { return p.parallel.loss_tiles > 1; },
     "tile the loss (a DeepSpeed config has no loss setting): full logits hold more than the plan predicts",
     "use --stack arctic or --stack hf (Liger's fused cross-entropy) or re-plan with --loss-tiles 1"},
};

Result<bool> check(const Plan& p) { return first_refusal(p, "deepspeed", kRefusals); }

// The deepspeed runner (deepspeed/launcher/runner.py parse_args) on the user's script, which
// reads the config through deepspeed.add_config_arguments' --deepspeed_config.
LaunchSpec launch(const Plan&) {
  LaunchSpec s{.launcher = "deepspeed",
               .usage = "TRAIN.py [ARGS...]",
               .about = {"TRAIN.py: your DeepSpeed training script; it gets --deepspeed_config (this folder's "
                         "ds_config.json) and finds the model in $LONGCTX_MODEL"},
               .setup = deepspeed_node_setup(),
               .command = {"deepspeed", "${DEEPSPEED_NODES[@]+\"${DEEPSPEED_NODES[@]}\"}", "--num_nodes \"$NNODES\"",
                           "--num_gpus \"$GPUS_PER_NODE\"", "--master_addr \"$MASTER_ADDR\"",
                           "--master_port \"$MASTER_PORT\"", "\"$1\"", "--deepspeed_config \"$here/ds_config.json\"",
                           "\"${@:2}\""},
               .takes_script = true};
  s.setup.push_back("export LONGCTX_MODEL=\"$MODEL\"");
  return s;
}

StackFiles write(const Plan& p) {
  StackConfig ds = deepspeed_config(p, DeepSpeedLauncher::Script);
  return {.files = {{kDeepSpeedConfigFile, ExportFile::Format::Json, std::move(ds.value), {}},
                    launch_script(p, "deepspeed", launch(p))},
          .approximations = std::move(ds.approximations)};
}

constexpr const char* kFileNames[] = {kDeepSpeedConfigFile, kLaunchScriptFile};

}  // namespace

const StackExporter kDeepSpeedExporter = {
    .word = "deepspeed",
    .files = "ds_config.json (a DeepSpeed config of longctx's own plans, for your DeepSpeed script)",
    .file_names = kFileNames,
    .plans_predict = nullptr,  // longctx's plans run on longctx's runtime: any stack may run them
    .check = check,
    .write = write,
};

}  // namespace longctx
