#include <functional>
#include <vector>

#include <fmt/format.h>

#include "cli/longctx/cluster_options.h"
#include "cli/common/commands.h"
#include "cli/longctx/plan_argument.h"
#include "common/atomic_file.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"
#include "planner/io/prediction_drift.h"
#include "cli/longctx/plan_output.h"
#include "cli/report/report_data.h"
#include "cli/report/report_html.h"
#include "cli/report/timeline_svg.h"

namespace longctx::cli {
namespace {

struct ExplainOptions {
  std::string plan_file;
  std::string svg;
  std::string html;
  int live_rows = 20;
};

// An output the command writes, opened (its path checked) before any is written: a bad
// --html leaves no --svg behind.
struct Output {
  AtomicFile file;
  std::function<std::string()> contents;
};

Result<std::vector<Output>> open_outputs(const ExplainOptions& o, const Evaluation& e) {
  LONGCTX_TRY(auto svg_apart, check_distinct_output(o.svg, "--svg", {{o.plan_file, "the plan file"}, {o.html, "--html", true}}));
  LONGCTX_TRY(auto html_apart, check_distinct_output(o.html, "--html", {{o.plan_file, "the plan file"}}));
  (void)svg_apart, (void)html_apart;
  std::vector<Output> out;
  if (!o.svg.empty()) {
    LONGCTX_TRY(auto svg, AtomicFile::open(o.svg, "--svg"));
    out.push_back({std::move(svg), [&e] { return timeline_svg(e); }});
  }
  if (!o.html.empty()) {
    LONGCTX_TRY(auto ladder, plan_file_ladder(o.plan_file));
    LONGCTX_TRY(auto html, AtomicFile::open(o.html, "--html"));
    out.push_back({std::move(html), [&e, ladder] { return report_html(e, ladder); }});
  }
  return out;
}

int run_explain(const ExplainOptions& o) {
  auto plan = read_plan_file(o.plan_file);
  if (!plan) return report_error(as_plan_argument(plan.error()));
  const Evaluation e = evaluate(*plan);
  auto outputs = open_outputs(o, e);
  if (!outputs) return report_error(as_plan_argument(outputs.error()));
  fmt::print("{}", render_plan(e, o.live_rows));
  fmt::print(stderr, "{}", drift_note(prediction_differences(plan->prediction, with_phase_predictions(e).prediction)));
  // Every output written before any is committed: a write that fails (a full disk) is
  // reported by its own commit() first, and the others' temporaries go with them, so the
  // command leaves all its files or none.
  for (auto& [file, contents] : *outputs) {
    const std::string text = contents();
    file.write(text.data(), text.size());  // a failure is kept for commit() to report
  }
  for (auto& output : *outputs)
    if (output.file.failed()) return report_error(output.file.commit().error());
  for (auto& output : *outputs) {
    if (auto committed = output.file.commit(); !committed) return report_error(committed.error());
    fmt::print("\nwrote {}\n", output.file.path());
  }
  return 0;
}

}  // namespace

Command add_explain_command(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  auto* sub = app.add_subcommand("explain", "Show where a plan's memory goes: the breakdown and live set at the peak, and the timeline");
  sub->add_option("plan", o->plan_file, "Plan file written by `longctx plan -o`")->required();
  sub->add_option("--svg", o->svg, "Also draw the device and host timeline, by category, as an SVG file");
  sub->add_option("--html", o->html,
                  "Also write an interactive report as one self-contained HTML file: the timeline (hover an op for "
                  "what is live there, drag or wheel to zoom), the knobs and the plan file's ladder if it has one");
  sub->add_option("--live", o->live_rows, "Rows of the live set at the peak to list")->capture_default_str();
  return {sub, [o] { return run_explain(*o); }};
}

}  // namespace longctx::cli
