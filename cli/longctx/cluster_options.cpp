#include "cli/longctx/cluster_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/common/model_paths.h"
#include "planner/core/knobs.h"
#include "planner/core/model_config.h"
#include "planner/core/settings.h"
#include "planner/io/quoted_text.h"
#include "planner/search/stack_answers.h"
#include "planner/stacks/profile.h"

namespace longctx::cli {
namespace {

// --stack's help names every stack the registry has, with what it is.
std::string help_of(const Setting& s, bool every_stack) {
  if (s.id != SettingId::stack) return s.rule.help;
  std::vector<std::string> stacks;
  for (const StackProfile* p : stack_profiles()) stacks.push_back(fmt::format("{} ({})", p->name, p->summary));
  const std::string last = stacks.back();
  stacks.pop_back();
  return fmt::format("{}: {} or {} (default: {}){}", s.rule.help, fmt::join(stacks, ", "), last,
                     stack_profiles().front()->name,
                     every_stack ? fmt::format("; {}: every stack's answer beside the default's", kEveryStack) : "");
}

void add_setting_option(CLI::App& app, const Setting& s, std::string& value, bool every_stack) {
  app.add_option(s.flag, value, help_of(s, every_stack));
}
void add_setting_option(CLI::App& app, const Setting& s, bool& given, bool every_stack) {
  app.add_flag(s.flag, given, help_of(s, every_stack));
}

}  // namespace

void add_cluster_options(CLI::App& app, ClusterOptions& o, bool every_stack) {
  app.add_option("--model", o.model,
                 "Preset name (any case; see `longctx models`) or its Hugging Face id, a Hub id ORG/NAME from the local "
                 "Hugging Face cache (never downloaded), or the path of a config.json or of a folder holding one")
      ->capture_default_str();
  app.add_option("--gpus", o.gpus, "Total GPUs (ranks)")->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default: the preset's, at most --gpus)");
  app.add_option("--gpu", o.gpu, "Hardware preset: h100-80gb, h200-141gb, a100-80gb, or cpu (the runtime's virtual device)")
      ->capture_default_str();
  app.add_option("--budget", o.budget, "Device memory budget per GPU, e.g. 80GiB (default: the preset's memory)");
  app.add_option("--host-mem", o.host_mem, "Host memory per node, e.g. 2TiB (default: the preset's)");
  app.add_flag("--expandable-segments", o.expandable_segments,
               "Predict the CUDA caching allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less "
               "fragmentation)");
  app.add_option("--techniques", o.techniques,
                 fmt::format("Comma list the search may use: {}; 'all' (default) or 'none'",
                             fmt::join(technique_names(all_techniques()), ",")))
      ->capture_default_str();
#define LONGCTX_SETTING_OPTION(field, Type, member, rule) add_setting_option(app, setting(SettingId::field), o.field, every_stack);
  LONGCTX_SETTING_TABLE(LONGCTX_SETTING_OPTION)
#undef LONGCTX_SETTING_OPTION
  app.add_flag("--json", o.json, "Print JSON for scripts instead of tables");
}


std::vector<NamedPath> cluster_input_paths(const ClusterOptions& o) {
  std::vector<NamedPath> paths = model_input_paths(o.model);
  paths.push_back({o.gpu, "--gpu"});
  return paths;
}

}  // namespace longctx::cli
