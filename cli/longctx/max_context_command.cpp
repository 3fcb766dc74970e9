#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/longctx/cluster_options.h"
#include "cli/common/commands.h"
#include "planner/search/search.h"
#include "planner/core/units.h"
#include "cli/longctx/plan_output.h"

namespace longctx::cli {
namespace {

int run_max_context(const ClusterOptions& o, bool no_ladder) {
  if (!o.json) fmt::print(stderr, "searching {} on {} GPUs of {} ...\n", o.model, o.gpus, o.gpu);
  auto r = answer_max_context(o, !no_ladder);
  if (!r) return report(r.error());
  if (o.json) {
    fmt::print("{}\n", max_context_json(*r).dump(2));
    return 0;
  }
  const auto& p = r->plan;
  // Every length up to the answer plans (padded to the layout); one granule more does not.
  const std::string granularity = r->granularity == 1 ? std::string("exact to the token")
                                                      : fmt::format("to a granularity of {} tokens", r->granularity);
  fmt::print("max context  {} tokens ({}), {}; {} binds beyond it\n", r->max_tokens, format_tokens(r->max_tokens),
             granularity, r->binding);
  fmt::print("model        {} on {} x {} ({} per GPU, {} host per node)\n", p.model.name, p.cluster.shape.world(),
             p.cluster.hardware.name, format_bytes(p.cluster.device_budget_bytes), format_bytes(p.cluster.host_budget_bytes_per_node));
  fmt::print("plan         {}\n", describe_knobs(p));
  if (!r->rule.empty()) fmt::print("rule         {}\n", r->rule);
  if (!r->layout.empty()) fmt::print("layout       {}\n", r->layout);
  fmt::print("memory       device peak {} as nvidia-smi shows it (allocated {} at {}, reserved {}), host {} per node\n",
             format_bytes(p.prediction.peak_nvidia_smi_bytes), format_bytes(p.prediction.peak_device_bytes),
             p.prediction.peak_at, format_bytes(p.prediction.peak_reserved_bytes), format_bytes(p.prediction.peak_host_bytes));
  fmt::print("speed        {:.1f} s per step, {:.0f} tokens/s, MFU {:.1f}%\n", p.prediction.step_time_s,
             p.prediction.tokens_per_s, p.prediction.mfu * 100);
  if (!r->ladder.empty()) {
    fmt::print("\nwhat each technique buys (added in order; each rung keeps the ones above)\n");
    std::vector<std::string> before;
    for (const auto& rung : r->ladder) {
      std::string added;
      for (const auto& t : rung.techniques)
        if (std::find(before.begin(), before.end(), t) == before.end()) added += (added.empty() ? "+" : ", +") + t;
      fmt::print("  {:<36} {:>9} {:>10} tokens   limit: {}\n", added, format_tokens(rung.max_tokens), rung.max_tokens,
                 rung.binding.empty() ? "-" : rung.binding);
      before = rung.techniques;
    }
  }
  return 0;
}

}  // namespace

Command add_max_context_command(CLI::App& app) {
  auto o = std::make_shared<ClusterOptions>();
  auto no_ladder = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand(
      "max-context",
      "The longest sequence any allowed plan trains on the cluster, the fastest plan there, and the ladder: the "
      "maximum as techniques are added one at a time (zero3, +ulysses, +checkpoint, +offload-checkpoints, "
      "+tiled-mlp/tiled-loss, +untied).");
  add_cluster_options(*sub, *o);
  sub->add_flag("--no-ladder", *no_ladder, "Skip the ladder (faster)");
  return {sub, [o, no_ladder] { return run_max_context(*o, *no_ladder); }};
}

}  // namespace longctx::cli
