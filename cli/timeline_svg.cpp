#include "timeline_svg.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "longctx/planner/units.h"

namespace longctx::cli {
namespace {

constexpr double kWidth = 1100, kLeft = 90, kRight = 170, kTop = 50;
constexpr double kDeviceHeight = 300, kGap = 70, kHostHeight = 120;

const std::array<const char*, kCategories> kColors = {
    "#4e79a7",  // params
    "#f28e2b",  // grads
    "#e15759",  // optimizer
    "#59a14f",  // activations
    "#edc948",  // transient
    "#9c755f",  // workspace
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A round step for axis ticks (1, 2 or 5 times a power of ten, in GiB or MiB).
double nice_step(double max_bytes) {
  const double raw = max_bytes / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

std::string timeline_svg(const Evaluation& e) {
  const auto& ops = e.graph.ops();
  const auto& per = e.sim.per_op;
  const std::size_t n = ops.size();
  const double plot_w = kWidth - kLeft - kRight;
  const double host_top = kTop + kDeviceHeight + kGap;
  const double height = host_top + kHostHeight + 60;
  const std::int64_t context = e.plan.cluster.hardware.context_bytes;
  const double budget = double(e.plan.cluster.device_budget_bytes);
  double dev_max = budget;
  double host_max = 1;
  for (const auto& m : per) {
    dev_max = std::max(dev_max, double(m.device_during + context));
    host_max = std::max(host_max, double(m.host_during * e.plan.cluster.shape.gpus_per_node));
  }
  host_max = std::max(host_max, 1.0);
  auto x = [&](double i) { return kLeft + plot_w * i / double(std::max<std::size_t>(n, 1)); };
  auto ydev = [&](double b) { return kTop + kDeviceHeight * (1 - b / dev_max); };
  auto yhost = [&](double b) { return host_top + kHostHeight * (1 - b / host_max); };

  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, height);
  const auto& pr = e.plan.prediction;
  s += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}: {} tokens on {} x {} — device peak {} "
                   "({}), host {} per node</text>\n",
                   kLeft, escape(e.plan.model.name), format_tokens(e.plan.train.seq), e.plan.cluster.shape.world(),
                   escape(e.plan.cluster.hardware.name), format_bytes(pr.peak_device_bytes),
                   pr.feasible ? "fits" : "does not fit", format_bytes(pr.peak_host_bytes));

  // Phases as shaded bands.
  const char* band[] = {"#f4f8fb", "#fbf6ee", "#f3f8f1", "#f7f2f7"};
  std::size_t start = 0;
  for (std::size_t i = 1; i <= n; ++i) {
    if (i < n && ops[i].phase == ops[start].phase) continue;
    const int ph = static_cast<int>(ops[start].phase);
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", x(double(start)), kTop,
                     x(double(i)) - x(double(start)), host_top + kHostHeight - kTop, band[ph]);
    if (x(double(i)) - x(double(start)) > 60)  // no label on a band too narrow for one
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#777\">{}</text>\n", x(double(start)) + 3, kTop - 6,
                       to_string(ops[start].phase));
    start = i;
  }

  // Device: stacked areas, context at the bottom, then the categories.
  std::vector<double> floor(n, double(context));
  auto area = [&](const std::vector<double>& lo, const std::vector<double>& hi, const char* color, const char* label) {
    std::string pts;
    for (std::size_t i = 0; i < n; ++i) pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(double(i)), ydev(hi[i]), x(double(i + 1)), ydev(hi[i]));
    for (std::size_t i = n; i-- > 0;) pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(double(i + 1)), ydev(lo[i]), x(double(i)), ydev(lo[i]));
    s += fmt::format("<polygon points=\"{}\" fill=\"{}\" stroke=\"none\"><title>{}</title></polygon>\n", pts, color, label);
  };
  if (context > 0) area(std::vector<double>(n, 0.0), floor, "#bab0ac", "context");
  for (int c = 0; c < kCategories; ++c) {
    std::vector<double> top = floor;
    for (std::size_t i = 0; i < n; ++i) top[i] += double(per[i].device_by_category_during[static_cast<std::size_t>(c)]);
    area(floor, top, kColors[static_cast<std::size_t>(c)], to_string(static_cast<Category>(c)));
    floor = top;
  }
  // Budget and peak.
  s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c00\" stroke-dasharray=\"6,4\"/>\n", kLeft,
                   kLeft + plot_w, ydev(budget), ydev(budget));
  s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#c00\">budget {}</text>\n", kLeft + plot_w + 6, ydev(budget) + 4,
                   format_bytes(e.plan.cluster.device_budget_bytes));
  if (e.sim.peak_op >= 0) {
    const double px = x(double(e.sim.peak_op) + 0.5), py = ydev(double(pr.peak_device_bytes));
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"black\"/>\n", px, py);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">peak {} at {}</text>\n", std::min(px, kLeft + plot_w - 120),
                     py - 8, format_bytes(pr.peak_device_bytes), escape(pr.peak_at));
  }
  // Axes.
  const double gib = 1024.0 * 1024 * 1024;
  auto ticks = [&](double max, auto y, double x0) {
    const double unit = max >= gib ? gib : 1024.0 * 1024;
    const double step = nice_step(max / unit) * unit;
    for (double v = 0; v <= max * 1.0001; v += step) {
      s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", x0, x0 + plot_w, y(v), y(v));
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", x0 - 6, y(v) + 4,
                       max >= gib ? fmt::format("{:.0f} GiB", v / gib) : fmt::format("{:.0f} MiB", v / (1024.0 * 1024)));
    }
  };
  ticks(dev_max, ydev, kLeft);
  s += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\">device bytes per GPU</text>\n", kTop + kDeviceHeight / 2 + 60,
                   kTop + kDeviceHeight / 2 + 60);

  // Host: total per node.
  std::string pts;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = double(per[i].host_during * e.plan.cluster.shape.gpus_per_node);
    pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(double(i)), yhost(v), x(double(i + 1)), yhost(v));
  }
  s += fmt::format("<polygon points=\"{:.1f},{:.1f} {}{:.1f},{:.1f}\" fill=\"#76b7b2\"><title>host</title></polygon>\n", kLeft,
                   yhost(0), pts, x(double(n)), yhost(0));
  ticks(host_max, yhost, kLeft);
  s += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\">host per node</text>\n", host_top + kHostHeight / 2 + 40,
                   host_top + kHostHeight / 2 + 40);
  s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">ops of one training step, in execution order ({} ops)</text>\n", kLeft,
                   host_top + kHostHeight + 30, n);

  // Legend.
  double ly = kTop + 10;
  for (int c = kCategories - 1; c >= 0; --c) {
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                     kLeft + plot_w + 10, ly + 20, kColors[static_cast<std::size_t>(c)], kLeft + plot_w + 28, ly + 31,
                     to_string(static_cast<Category>(c)));
    ly += 18;
  }
  if (context > 0)
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#bab0ac\"/><text x=\"{}\" y=\"{}\">context</text>\n",
                     kLeft + plot_w + 10, ly + 20, kLeft + plot_w + 28, ly + 31);
  s += "</svg>\n";
  return s;
}

}  // namespace longctx::cli
