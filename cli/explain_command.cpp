#include <fstream>

#include <fmt/format.h>

#include "cluster_options.h"
#include "commands.h"
#include "common/atomic_file.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"
#include "planner/io/prediction_drift.h"
#include "plan_output.h"
#include "timeline_svg.h"

namespace longctx::cli {
namespace {

struct ExplainOptions {
  std::string plan_file;
  std::string svg;
  int live_rows = 20;
};

int run_explain(const ExplainOptions& o) {
  auto plan = read_plan_file(o.plan_file);
  if (!plan) return report(plan.error());
  const Evaluation e = evaluate(*plan);
  fmt::print("{}", render_plan(e, o.live_rows));
  fmt::print(stderr, "{}", drift_note(prediction_differences(plan->prediction, with_phase_predictions(e).prediction)));
  if (!o.svg.empty()) {
    if (auto written = write_text_atomically(o.svg, "--svg", timeline_svg(e)); !written) return report(written.error());
    fmt::print("\nwrote {}\n", o.svg);
  }
  return 0;
}

}  // namespace

Command add_explain_command(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  auto* sub = app.add_subcommand("explain", "Show where a plan's memory goes: the breakdown and live set at the peak, and the timeline");
  sub->add_option("plan", o->plan_file, "Plan file written by `longctx plan -o`")->required();
  sub->add_option("--svg", o->svg, "Also draw the device and host timeline, by category, as an SVG file");
  sub->add_option("--live", o->live_rows, "Rows of the live set at the peak to list")->capture_default_str();
  return {sub, [o] { return run_explain(*o); }};
}

}  // namespace longctx::cli
