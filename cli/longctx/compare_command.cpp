#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/longctx/cluster_options.h"
#include "cli/common/commands.h"
#include "common/atomic_file.h"
#include "planner/io/comparison.h"
#include "planner/io/prediction_drift.h"
#include "planner/core/units.h"
#include "planner/stacks/profile.h"

namespace longctx::cli {
namespace {

struct CompareOptions {
  std::string plan_file, trace_file, svg;
  bool json = false;
};

std::string overlay_svg(const std::vector<PhaseComparison>& rows, const std::string& title) {
  const double w = 1000, h = 380, left = 90, top = 40, plot_w = w - left - 30, plot_h = h - top - 60;
  std::int64_t max = 1;
  for (const auto& r : rows) max = std::max({max, r.predicted, r.measured});
  auto x = [&](std::size_t i) { return left + plot_w * (double(i) + 0.5) / double(std::max<std::size_t>(rows.size(), 1)); };
  auto y = [&](double b) { return top + plot_h * (1 - b / double(max)); };
  std::string s = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
                              "font-size=\"12\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                              "<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                              w, h, left, title);
  auto line = [&](bool predicted, const char* color, const char* label, double ly) {
    std::string pts;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::int64_t v = predicted ? rows[i].predicted : rows[i].measured;
      if (v >= 0) pts += fmt::format("{:.1f},{:.1f} ", x(i), y(double(v)));
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", pts, color,
                     predicted ? " stroke-dasharray=\"6,3\"" : "");
    s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", left + 10, ly, color, label);
  };
  line(false, "#1f77b4", "measured peak per phase", top + 14);
  line(true, "#d62728", "predicted peak per phase (dashed)", top + 30);
  for (int t = 0; t <= 4; ++t) {
    const double v = double(max) * t / 4;
    s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1f}\" "
                     "text-anchor=\"end\">{}</text>\n",
                     left, left + plot_w, y(v), y(v), left - 6, y(v) + 4, format_bytes(static_cast<std::int64_t>(v)));
  }
  const std::size_t every = std::max<std::size_t>(1, rows.size() / 12);
  for (std::size_t i = 0; i < rows.size(); i += every)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"end\" transform=\"rotate(-30 {:.1f} {})\">{}</text>\n", x(i),
                     top + plot_h + 14, x(i), top + plot_h + 14, rows[i].phase);
  return s + "</svg>\n";
}

int run_compare(const CompareOptions& o) {
  if (auto apart = check_distinct_output(o.svg, "--svg", {{o.plan_file, "--plan"}, {o.trace_file, "--trace"}}); !apart)
    return report_error(apart.error());
  if (o.json && names_standard_output(o.svg))
    return report_error(Error::bad_input("--svg", fmt::format("'{}' is standard output, where --json prints the "
                                                              "comparison: two documents there read as neither; name a "
                                                              "file, or leave out --json",
                                                              o.svg)));
  auto plan = read_plan_file(o.plan_file);
  if (!plan) return report_error(plan.error());
  auto trace = read_trace_file(o.trace_file);
  if (!trace) return report_error(trace.error());
  auto compared = compare_to_trace(*plan, *trace, o.trace_file);
  if (!compared) return report_error(compared.error());
  const Comparison& c = *compared;
  fmt::print(stderr, "{}", drift_note(c.drift));
  if (!o.svg.empty()) {
    const std::string svg = overlay_svg(c.phases, fmt::format("{}: predicted {} vs measured {} ({:+.2f}%)", c.evaluation.plan.model.name,
                                                              format_bytes(c.predicted), format_bytes(c.measured), 100 * c.error));
    if (auto r = write_text_atomically(o.svg, "--svg", svg); !r) return report_error(r.error());
    // --svg naming standard output makes the drawing the one document printed there (as `plan
    // -o /dev/stdout` makes the plan file): the table after it would leave it no SVG.
    if (names_standard_output(o.svg)) return 0;
  }
  if (o.json) {
    fmt::print("{}\n", comparison_json(c).dump(2));
    return 0;
  }
  fmt::print("peak      predicted {} ({} bytes), measured {} ({} bytes): error {:+.3f}%\n", format_bytes(c.predicted), c.predicted,
             format_bytes(c.measured), c.measured, 100 * c.error);
  if (c.baseline > 0) fmt::print("baseline  {} added to every measured figure: {}\n", format_bytes(c.baseline), c.baseline_source);
  if (const char* note = stack_profile(c.evaluation.plan.train.stack.kind).profiler_trace_note;
      note && c.trace_source != "longctx")
    fmt::print("stack     {}\n", note);
  if (c.measured_peak_phase.empty())
    fmt::print("at        predicted {} (op {}); the measured phase is unknown: {}\n", c.predicted_peak_phase,
               c.evaluation.plan.prediction.peak_at, c.phase_note);
  else
    fmt::print("at        predicted {} (op {}), measured {}: {}\n", c.predicted_peak_phase, c.evaluation.plan.prediction.peak_at,
               c.measured_peak_phase, c.same_peak_phase ? "same phase" : "different phases");
  if (c.phase_note.empty()) {
    fmt::print("\n{:<22} {:>14} {:>14} {:>9}\n", "phase", "predicted", "measured", "error");
    for (const auto& r : c.phases)
      fmt::print("{:<22} {:>14} {:>14} {:>9}\n", r.phase, r.predicted, r.measured >= 0 ? fmt::format("{}", r.measured) : "-",
                 r.measured > 0 ? fmt::format("{:+.2f}%", 100 * relative_error(r.predicted, r.measured)) : "-");
  }
  return 0;
}

}  // namespace

Command add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  auto* sub = app.add_subcommand("compare",
                                 "Hold a plan's prediction against a measured run: the trace `longctx run --trace` wrote, or "
                                 "a PyTorch profiler trace exported with profile_memory=True");
  sub->add_option("--plan", o->plan_file, "Plan file")->required();
  sub->add_option("--trace", o->trace_file, "Chrome trace event JSON of the run")->required();
  sub->add_option("--svg", o->svg, "Draw predicted and measured peaks per phase");
  sub->add_flag("--json", o->json, "JSON for scripts");
  return {sub, [o] { return run_compare(*o); }};
}

}  // namespace longctx::cli
