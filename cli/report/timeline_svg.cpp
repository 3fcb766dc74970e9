#include "cli/report/timeline_svg.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "cli/report/markup_text.h"
#include "cli/report/memory_timeline.h"
#include "planner/core/units.h"

namespace longctx::cli {
namespace {

constexpr double kWidth = 1100, kLeft = 90, kRight = 170, kTop = 64;
constexpr double kDeviceHeight = 300, kGap = 70, kHostHeight = 120;
// No column narrower than this: one op's spike (a loss tile's workspace) stays visible
// among ten thousand ops.
constexpr double kMinColumnWidth = 3;

// The device layers bottom up: the categories, the allocator's reserve, the context.
constexpr int kLayers = kCategories + 2;
const std::array<const char*, kLayers> kColors = {
    "#4e79a7",  // params
    "#f28e2b",  // grads
    "#e15759",  // optimizer
    "#59a14f",  // activations
    "#edc948",  // transient
    "#9c755f",  // workspace
    "#d4cdc9",  // allocator reserve
    "#79706e",  // context
};

const char* layer_name(int layer) {
  if (layer < kCategories) return to_string(static_cast<Category>(layer));
  return layer == kCategories ? "allocator reserve" : "context";
}

// A round step for axis ticks (1, 2 or 5 times a power of ten, in GiB or MiB).
double nice_step(double max_bytes) {
  const double raw = max_bytes / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

// The picture's geometry: the ops in columns of at least kMinColumnWidth, each drawn as the op
// whose binding figure is the highest among those it covers; the device plot above, the host
// plot below.
struct Canvas {
  const Evaluation& e;
  MemoryTimeline t;
  std::size_t n;                     // ops
  std::size_t cols;                  // columns, at most one per op
  std::vector<std::size_t> shown;    // per column: the op it draws
  std::vector<double> host;          // per column: the most host memory per node among its ops
  double plot_w, host_top, height;
  double budget, dev_max, host_max;
  std::string s;                     // the SVG so far

  explicit Canvas(const Evaluation& ev) : e(ev), t(memory_timeline(ev)), n(t.ops()) {
    plot_w = kWidth - kLeft - kRight;
    host_top = kTop + kDeviceHeight + kGap;
    height = host_top + kHostHeight + 60;
    cols = std::max<std::size_t>(1, std::min<std::size_t>(n, static_cast<std::size_t>(plot_w / kMinColumnWidth)));
    for (std::size_t c = 0; c < cols && n > 0; ++c) {
      std::size_t best = first_op(c);
      double most_host = 0;
      for (std::size_t i = first_op(c); i < first_op(c + 1); ++i) {
        if (t.binding(i) > t.binding(best)) best = i;
        most_host = std::max(most_host, double(t.host_per_node[i]));
      }
      shown.push_back(best);
      host.push_back(most_host);
    }
    budget = double(e.plan.cluster.device_budget_bytes);
    dev_max = std::max(budget, double(t.peak_bytes));
    host_max = 1;
    for (const double h : host) host_max = std::max(host_max, h);
  }
  std::size_t first_op(std::size_t column) const { return n * column / cols; }
  double x(double column) const { return kLeft + plot_w * column / double(cols); }
  double x_of_op(std::size_t op) const { return kLeft + plot_w * (double(op) + 0.5) / double(std::max<std::size_t>(n, 1)); }
  double ydev(double b) const { return kTop + kDeviceHeight * (1 - b / dev_max); }
  double yhost(double b) const { return host_top + kHostHeight * (1 - b / host_max); }
  // The top of `layer` (and of every layer below it) at `op`.
  double layer_top(std::size_t op, int layer) const {
    if (layer == kCategories) return double(t.reserved[op]);
    if (layer > kCategories) return double(t.binding(op));
    double sum = 0;
    for (int c = 0; c <= layer; ++c) sum += double(t.allocated[op][static_cast<std::size_t>(c)]);
    return sum;
  }
};

void draw_title(Canvas& c) {
  const auto& e = c.e;
  const auto& pr = e.plan.prediction;
  c.s += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, c.height);
  c.s += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}: {} tokens on {} x {} — {} peak {} of {} "
                     "({}), host {} per node</text>\n",
                     kLeft, escape_markup(e.plan.model.name), format_tokens(e.plan.train.seq), e.plan.cluster.shape.world(),
                     escape_markup(e.plan.cluster.hardware.name), binding_figure_name(e.plan), format_bytes(pr.peak_nvidia_smi_bytes),
                     format_bytes(e.plan.cluster.device_budget_bytes), pr.feasible ? "fits" : "does not fit",
                     format_bytes(pr.peak_host_bytes));
  const std::string column = c.n > c.shown.size()
                                 ? fmt::format("each column shows the op with the highest {} figure of the ~{:.0f} it covers",
                                               binding_figure_name(e.plan), double(c.n) / double(c.cols))
                                 : "one column per op";
  c.s += fmt::format("<text x=\"{}\" y=\"40\" fill=\"#555\">peaks: allocated {}, reserved {}, context {}; {}</text>\n", kLeft,
                     format_bytes(pr.peak_device_bytes), format_bytes(pr.peak_reserved_bytes), format_bytes(c.t.context), column);
}

// Phases as shaded bands behind both plots.
void draw_phase_bands(Canvas& c) {
  const auto& ops = c.e.graph.ops();
  const char* band[] = {"#f4f8fb", "#fbf6ee", "#f3f8f1", "#f7f2f7"};
  std::size_t start = 0;
  for (std::size_t i = 1; i <= c.n; ++i) {
    if (i < c.n && ops[i].phase == ops[start].phase) continue;
    const int ph = static_cast<int>(ops[start].phase);
    const double x0 = kLeft + c.plot_w * double(start) / double(c.n), x1 = kLeft + c.plot_w * double(i) / double(c.n);
    c.s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", x0, kTop, x1 - x0,
                       c.host_top + kHostHeight - kTop, band[ph]);
    if (x1 - x0 > 60)  // no label on a band too narrow for one
      c.s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#777\">{}</text>\n", x0 + 3, kTop - 6, to_string(ops[start].phase));
    start = i;
  }
}

// Device: each layer as one stepped area over the columns, on top of the layers below it.
void draw_device_areas(Canvas& c) {
  const std::size_t cols = c.shown.size();
  for (int layer = 0; layer < kLayers; ++layer) {
    if (layer == kLayers - 1 && c.t.context == 0) continue;
    std::string pts;
    for (std::size_t k = 0; k < cols; ++k) {
      const double y = c.ydev(c.layer_top(c.shown[k], layer));
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", c.x(double(k)), y, c.x(double(k + 1)), y);
    }
    for (std::size_t k = cols; k-- > 0;) {
      const double y = layer == 0 ? c.ydev(0) : c.ydev(c.layer_top(c.shown[k], layer - 1));
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", c.x(double(k + 1)), y, c.x(double(k)), y);
    }
    c.s += fmt::format("<polygon points=\"{}\" fill=\"{}\" stroke=\"none\"><title>{}</title></polygon>\n", pts,
                       kColors[static_cast<std::size_t>(layer)], layer_name(layer));
  }
}

void draw_budget_and_peak(Canvas& c) {
  c.s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c00\" stroke-dasharray=\"6,4\"/>\n", kLeft,
                     kLeft + c.plot_w, c.ydev(c.budget), c.ydev(c.budget));
  c.s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#c00\">budget {}</text>\n", kLeft + c.plot_w + 6, c.ydev(c.budget) + 4,
                     format_bytes(c.e.plan.cluster.device_budget_bytes));
  if (c.t.peak_op < 0) return;
  const auto peak = static_cast<std::size_t>(c.t.peak_op);
  const double px = c.x_of_op(peak), py = c.ydev(double(c.t.peak_bytes));
  c.s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"black\"/>\n", px, py);
  c.s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{} peak {} at {}</text>\n",
                     std::clamp(px, kLeft + 140, kLeft + c.plot_w - 140), py - 8, binding_figure_name(c.e.plan),
                     format_bytes(c.t.peak_bytes), escape_markup(format(c.e.graph.op(c.t.peak_op).name)));
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

// Host: the total per node, the most of each column's ops.
void draw_host(Canvas& c) {
  std::string pts;
  for (std::size_t k = 0; k < c.host.size(); ++k)
    pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", c.x(double(k)), c.yhost(c.host[k]), c.x(double(k + 1)), c.yhost(c.host[k]));
  c.s += fmt::format("<polygon points=\"{:.1f},{:.1f} {}{:.1f},{:.1f}\" fill=\"#76b7b2\"><title>host</title></polygon>\n", kLeft,
                     c.yhost(0), pts, c.x(double(c.host.size())), c.yhost(0));
  draw_ticks(c, c.host_max, [&](double b) { return c.yhost(b); });
  c.s += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\">host per node</text>\n",
                     c.host_top + kHostHeight / 2 + 40, c.host_top + kHostHeight / 2 + 40);
  c.s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">ops of one training step, in execution order ({} ops)</text>\n", kLeft,
                     c.host_top + kHostHeight + 30, c.n);
}

void draw_legend(Canvas& c) {
  const double lx = kLeft + c.plot_w;
  double ly = kTop + 10;
  for (int layer = kLayers - 1; layer >= 0; --layer) {
    if (layer == kLayers - 1 && c.t.context == 0) continue;
    c.s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n", lx + 10,
                       ly + 20, kColors[static_cast<std::size_t>(layer)], lx + 28, ly + 31, layer_name(layer));
    ly += 18;
  }
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
