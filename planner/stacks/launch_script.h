#pragma once
// The launch script `longctx export` writes beside a stack's configs (launch.sh): bash, run
// on every node, taking the nodes, the GPUs per node and the rendezvous (NNODES,
// GPUS_PER_NODE, NODE_RANK, MASTER_ADDR, MASTER_PORT) from the environment with the plan's
// shape as defaults, refusing a world size the plan was not made for (its memory is per rank
// at that size), exporting the environment the plan assumes (PYTORCH_CUDA_ALLOC_CONF with
// expandable segments), finding its config files in its own folder wherever it is run from,
// and naming the model as the user gave it (a Hub id or a folder: model_to_load).
#include <string>
#include <vector>

#include "planner/core/plan.h"
#include "planner/stacks/exporter.h"

namespace longctx {

inline constexpr const char* kLaunchScriptFile = "launch.sh";

// What one stack's script runs after the shared part. Every string is bash text: "$here"
// names the script's folder, "$NNODES" and the others the parameters, "$MODEL" the model.
struct LaunchSpec {
  const char* launcher;               // "torchrun", "accelerate launch", "deepspeed", "arctic_training"
  const char* usage;                  // the script's arguments: "TRAIN.py [ARGS...]"
  std::vector<std::string> about;     // comment lines: what the arguments and variables are
  std::vector<std::string> setup;     // lines between the parameters and the command
  std::vector<std::string> command;   // the command's words (one a line, joined by " \")
  bool takes_model = true;            // MODEL is a parameter (else the configs name the model)
  bool takes_script = false;          // the first argument is the user's training script
};

// launch.sh: the shared prologue, then `s`. A Text file (its text in `value`), executable.
ExportFile launch_script(const Plan& p, const char* word, const LaunchSpec& s);

// The model a stack loads: the plan's model source (the Hub id given, a preset's Hub id, or the
// folder of the config.json read), else its name.
std::string model_to_load(const Plan& p);

// The lines that set DEEPSPEED_NODES, the deepspeed runner's node arguments: on more than one
// node each node is launched by itself (--no_ssh with --node_rank; deepspeed/launcher/runner.py
// parse_args), from a hostfile of NNODES placeholder names with GPUS_PER_NODE slots each, which
// the runner needs all the same (runner.py main(): without one it keeps to the local GPUs and
// refuses --num_nodes above 1; launch.py reads the names only as its world info's keys); on one
// node none are needed.
std::vector<std::string> deepspeed_node_setup();

}  // namespace longctx
