#include "timeline_svg.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "planner/core/units.h"

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

// The picture's geometry: one x step per op; the device plot above, the host plot below.
struct Canvas {
  const Evaluation& e;
  std::size_t n;                 // ops
  double plot_w, host_top, height;
  std::int64_t context;          // bytes outside the allocator, at the bottom of the device plot
  double budget, dev_max, host_max;
  std::string s;                 // the SVG so far

  explicit Canvas(const Evaluation& ev) : e(ev), n(ev.graph.ops().size()) {
    plot_w = kWidth - kLeft - kRight;
    host_top = kTop + kDeviceHeight + kGap;
    height = host_top + kHostHeight + 60;
    context = plan_context_bytes(e.plan);
    budget = double(e.plan.cluster.device_budget_bytes);
    dev_max = budget;
    host_max = 1;
    for (const auto& m : e.sim.per_op) {
      dev_max = std::max(dev_max, double(m.device_during + context));
      host_max = std::max(host_max, host_per_node(m));
    }
    host_max = std::max(host_max, 1.0);
  }
  double host_per_node(const OpMemory& m) const { return double(m.host_during * e.plan.cluster.shape.gpus_per_node); }
  double x(double i) const { return kLeft + plot_w * i / double(std::max<std::size_t>(n, 1)); }
  double ydev(double b) const { return kTop + kDeviceHeight * (1 - b / dev_max); }
  double yhost(double b) const { return host_top + kHostHeight * (1 - b / host_max); }
};

void draw_title(Canvas& c) {
  const auto& e = c.e;
  const auto& pr = e.plan.prediction;
  c.s += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, c.height);
  c.s += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}: {} tokens on {} x {} — device peak {} "
                     "({}), host {} per node</text>\n",
                     kLeft, escape(e.plan.model.name), format_tokens(e.plan.train.seq), e.plan.cluster.shape.world(),
                     escape(e.plan.cluster.hardware.name), format_bytes(pr.peak_device_bytes),
                     pr.feasible ? "fits" : "does not fit", format_bytes(pr.peak_host_bytes));
}

// Phases as shaded bands behind both plots.
void draw_phase_bands(Canvas& c) {
  const auto& ops = c.e.graph.ops();
  const char* band[] = {"#f4f8fb", "#fbf6ee", "#f3f8f1", "#f7f2f7"};
  std::size_t start = 0;
  for (std::size_t i = 1; i <= c.n; ++i) {
    if (i < c.n && ops[i].phase == ops[start].phase) continue;
    const int ph = static_cast<int>(ops[start].phase);
    const double x0 = c.x(double(start)), x1 = c.x(double(i));
    c.s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", x0, kTop, x1 - x0,
                       c.host_top + kHostHeight - kTop, band[ph]);
    if (x1 - x0 > 60)  // no label on a band too narrow for one
      c.s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#777\">{}</text>\n", x0 + 3, kTop - 6, to_string(ops[start].phase));
    start = i;
  }
}

// Device: stacked areas, context at the bottom, then the categories.
void draw_device_areas(Canvas& c) {
  const std::size_t n = c.n;
  std::vector<double> floor(n, double(c.context));
  auto area = [&](const std::vector<double>& lo, const std::vector<double>& hi, const char* color, const char* label) {
    std::string pts;
    for (std::size_t i = 0; i < n; ++i)
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", c.x(double(i)), c.ydev(hi[i]), c.x(double(i + 1)), c.ydev(hi[i]));
    for (std::size_t i = n; i-- > 0;)
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", c.x(double(i + 1)), c.ydev(lo[i]), c.x(double(i)), c.ydev(lo[i]));
    c.s += fmt::format("<polygon points=\"{}\" fill=\"{}\" stroke=\"none\"><title>{}</title></polygon>\n", pts, color, label);
  };
  if (c.context > 0) area(std::vector<double>(n, 0.0), floor, "#bab0ac", "context");
  for (int cat = 0; cat < kCategories; ++cat) {
    std::vector<double> top = floor;
    for (std::size_t i = 0; i < n; ++i) top[i] += double(c.e.sim.per_op[i].device_by_category_during[static_cast<std::size_t>(cat)]);
    area(floor, top, kColors[static_cast<std::size_t>(cat)], to_string(static_cast<Category>(cat)));
    floor = top;
  }
}

void draw_budget_and_peak(Canvas& c) {
  const auto& pr = c.e.plan.prediction;
  c.s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c00\" stroke-dasharray=\"6,4\"/>\n", kLeft,
                     kLeft + c.plot_w, c.ydev(c.budget), c.ydev(c.budget));
  c.s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#c00\">budget {}</text>\n", kLeft + c.plot_w + 6, c.ydev(c.budget) + 4,
                     format_bytes(c.e.plan.cluster.device_budget_bytes));
  if (c.e.sim.peak_op < 0) return;
  const double px = c.x(double(c.e.sim.peak_op) + 0.5), py = c.ydev(double(pr.peak_device_bytes + c.context));
  c.s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"black\"/>\n", px, py);
  c.s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">peak {} at {}</text>\n",
                     std::min(px, kLeft + c.plot_w - 120), py - 8, format_bytes(pr.peak_device_bytes), escape(pr.peak_at));
}

// Horizontal grid lines and labels from 0 to max, in MiB or GiB steps.
template <class Y>
void draw_ticks(Canvas& c, double max, Y y) {
  const double gib = 1024.0 * 1024 * 1024;
  const double unit = max >= gib ? gib : 1024.0 * 1024;
  const double step = nice_step(max / unit) * unit;
  for (double v = 0; v <= max * 1.0001; v += step) {
    c.s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", kLeft, kLeft + c.plot_w, y(v), y(v));
    c.s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6, y(v) + 4,
                       max >= gib ? fmt::format("{:.0f} GiB", v / gib) : fmt::format("{:.0f} MiB", v / (1024.0 * 1024)));
  }
}

// Host: the total per node.
void draw_host(Canvas& c) {
  std::string pts;
  for (std::size_t i = 0; i < c.n; ++i) {
    const double v = c.host_per_node(c.e.sim.per_op[i]);
    pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", c.x(double(i)), c.yhost(v), c.x(double(i + 1)), c.yhost(v));
  }
  c.s += fmt::format("<polygon points=\"{:.1f},{:.1f} {}{:.1f},{:.1f}\" fill=\"#76b7b2\"><title>host</title></polygon>\n", kLeft,
                     c.yhost(0), pts, c.x(double(c.n)), c.yhost(0));
  draw_ticks(c, c.host_max, [&](double b) { return c.yhost(b); });
  c.s += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\">host per node</text>\n",
                     c.host_top + kHostHeight / 2 + 40, c.host_top + kHostHeight / 2 + 40);
  c.s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">ops of one training step, in execution order ({} ops)</text>\n", kLeft,
                     c.host_top + kHostHeight + 30, c.n);
}

void draw_legend(Canvas& c) {
  const double lx = kLeft + c.plot_w;
  double ly = kTop + 10;
  for (int cat = kCategories - 1; cat >= 0; --cat) {
    c.s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n", lx + 10,
                       ly + 20, kColors[static_cast<std::size_t>(cat)], lx + 28, ly + 31, to_string(static_cast<Category>(cat)));
    ly += 18;
  }
  if (c.context > 0)
    c.s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#bab0ac\"/><text x=\"{}\" y=\"{}\">context</text>\n",
                       lx + 10, ly + 20, lx + 28, ly + 31);
}

}  // namespace

std::string timeline_svg(const Evaluation& e) {
  Canvas c(e);
  draw_title(c);
  draw_phase_bands(c);
  draw_device_areas(c);
  draw_budget_and_peak(c);
  draw_ticks(c, c.dev_max, [&](double b) { return c.ydev(b); });
  c.s += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\">device bytes per GPU</text>\n",
                     kTop + kDeviceHeight / 2 + 60, kTop + kDeviceHeight / 2 + 60);
  draw_host(c);
  draw_legend(c);
  c.s += "</svg>\n";
  return std::move(c.s);
}

}  // namespace longctx::cli
