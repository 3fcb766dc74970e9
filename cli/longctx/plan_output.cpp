#include "cli/longctx/plan_output.h"

#include <algorithm>
#include <fmt/format.h>

#include "planner/core/knobs.h"
#include "planner/core/units.h"
#include "planner/io/export.h"
#include "planner/stacks/profile.h"
#include "planner/io/quoted_text.h"

namespace longctx::cli {

namespace {

std::string bar(std::int64_t v, std::int64_t max, int width) {
  const int n = max > 0 ? static_cast<int>(double(v) / double(max) * width + 0.5) : 0;
  std::string s;
  for (int i = 0; i < n; ++i) s += "#";
  return s;
}

// The largest device figure in each of ~24 stretches of the schedule.
std::string render_timeline(const Evaluation& e) {
  std::string out;
  const auto& ops = e.graph.ops();
  const int buckets = std::min<int>(24, static_cast<int>(ops.size()));
  std::int64_t max = 0;
  for (const auto& m : e.sim.per_op) max = std::max(max, m.device_during);
  out += fmt::format("\ndevice memory over the step (max in each stretch; # = {:.0f}%)\n", 100.0 / 40);
  for (int b = 0; b < buckets; ++b) {
    const std::size_t lo = ops.size() * static_cast<std::size_t>(b) / static_cast<std::size_t>(buckets);
    const std::size_t hi = ops.size() * static_cast<std::size_t>(b + 1) / static_cast<std::size_t>(buckets);
    std::int64_t v = 0;
    std::size_t at = lo;
    for (std::size_t i = lo; i < hi; ++i)
      if (e.sim.per_op[i].device_during > v) { v = e.sim.per_op[i].device_during; at = i; }
    out += fmt::format("  {:<34} {:>11} |{}\n", format(ops[at].name).substr(0, 34), format_bytes(v), bar(v, max, 40));
  }
  return out;
}

}  // namespace

std::string render_padding(const Plan& p) {
  const std::int64_t pad = padding_tokens(p.train.seq, p.parallel);
  const std::int64_t padded = padded_seq(p.train.seq, p.parallel), per_rank = tokens_per_rank(p.train, p.parallel);
  if (pad == 0) return fmt::format("padding   none: {} tokens per rank\n", format_count(per_rank));
  const std::string multiple = p.parallel.ring > 1 ? fmt::format("2 x ring {} x ulysses {}", p.parallel.ring, p.parallel.ulysses)
                                                   : fmt::format("ulysses {}", p.parallel.ulysses);
  return fmt::format("padding   {} token{} a sample, to {} (a multiple of {}): {} tokens per rank; masked "
                     "out of the loss, counted in memory and time\n",
                     format_count(pad), pad > 1 ? "s" : "", format_count(padded), multiple, format_count(per_rank));
}

std::string budget_note(const Plan& p) {
  const Hardware& hw = p.cluster.hardware;
  if (hw.backend != Backend::Cuda || p.cluster.device_budget_bytes <= hw.device_memory_bytes) return "";
  return fmt::format("{} per GPU is above {}'s {} of device memory: the answer is for a larger device",
                     format_bytes(p.cluster.device_budget_bytes), terminal_line(hw.name), format_bytes(hw.device_memory_bytes));
}

std::string render_plan(const Evaluation& e, int live_rows) {
  const Plan& p = e.plan;
  const Prediction& pr = p.prediction;
  std::string out;
  out += fmt::format("model     {} ({} parameters; {})\n", terminal_line(p.model.name), format_parameters(p.model.total_params()),
                     describe_model(p.model, p.train.seq));
  if (const std::string note = max_positions_note(p.model, p.train.seq); !note.empty())
    out += fmt::format("positions {}\n", note);
  out += fmt::format("cluster   {} x {} ({} node{} of {}), budget {} per GPU, host {} per node\n",
                     p.cluster.shape.world(), terminal_line(p.cluster.hardware.name), p.cluster.shape.nodes,
                     p.cluster.shape.nodes > 1 ? "s" : "", p.cluster.shape.gpus_per_node,
                     format_bytes(p.cluster.device_budget_bytes), format_bytes(p.cluster.host_budget_bytes_per_node));
  if (const std::string note = budget_note(p); !note.empty()) out += fmt::format("budget    {}\n", note);
  out += fmt::format("train     seq {}, micro-batch {}, {} compute, {} gradients\n",
                     describe_tokens(p.train.seq), p.train.micro_batch, to_string(p.train.dtype),
                     to_string(p.train.grad_dtype));
  if (!stack_profile(p.train.stack.kind).runtime_runs_it) out += fmt::format("stack     {}\n", describe(p.train.stack));
  out += render_padding(p);
  out += fmt::format("parallel  {}\n", describe_knobs(p));
  out += fmt::format("export    {}\n", describe_exports(p));
  const std::string why = allocator_binds(p, pr) ? fmt::format(" (the caching allocator cannot place every block within the "
                                                 "budget: its cached segments are split too finely for a later "
                                                 "request, {} allocated at the peak)",
                                                 format_bytes(pr.peak_device_bytes))
                          : pr.binding.empty() ? ""
                                               : fmt::format(" ({} exceeded)", pr.binding);
  out += fmt::format("verdict   {}: device peak {} of {}, host peak {} of {} per node{}\n",
                     pr.feasible ? "FITS" : "DOES NOT FIT", format_bytes(pr.peak_nvidia_smi_bytes),
                     format_bytes(p.cluster.device_budget_bytes), format_bytes(pr.peak_host_bytes),
                     format_bytes(p.cluster.host_budget_bytes_per_node), why);
  if (p.cluster.hardware.backend == Backend::Cpu)  // no caching allocator, no CUDA context, no nvidia-smi
    out += fmt::format("device    allocated {} (peak at {}): the CPU virtual device counts every byte and caches none\n",
                       format_bytes(pr.peak_device_bytes), pr.peak_at);
  else
    out += fmt::format("device    allocated {}, reserved {} (peak at {}), nvidia-smi {} with {} outside the allocator{}\n",
                       format_bytes(pr.peak_device_bytes), format_bytes(pr.peak_reserved_bytes), pr.reserved_peak_at,
                       format_bytes(pr.peak_nvidia_smi_bytes), format_bytes(pr.peak_nvidia_smi_bytes - pr.peak_reserved_bytes),
                       p.cluster.expandable_segments ? "; expandable segments" : "");
  out += fmt::format("speed     {:.2f} s per step, {:.0f} tokens/s, MFU {:.1f}%\n", pr.step_time_s, pr.tokens_per_s, pr.mfu * 100);
  out += fmt::format("\npeak at   {} ({} phase)\n", pr.peak_at,
                     e.sim.peak_op >= 0 ? to_string(e.graph.op(e.sim.peak_op).phase) : "?");

  out += "\nbreakdown at the device peak\n";
  for (const auto& [k, v] : pr.breakdown) {
    if (v == 0) continue;
    out += fmt::format("  {:<12} {:>12}  {:5.1f}%\n", k, format_bytes(v), 100.0 * double(v) / double(pr.peak_nvidia_smi_bytes));
  }
  out += fmt::format("  {:<12} {:>12}\n", "total", format_bytes(pr.peak_nvidia_smi_bytes));

  out += fmt::format("\nlive at the peak (largest {} of {})\n", std::min<std::size_t>(live_rows, e.sim.live_at_peak.size()),
                     e.sim.live_at_peak.size());
  for (std::size_t i = 0; i < e.sim.live_at_peak.size() && i < static_cast<std::size_t>(live_rows); ++i) {
    const auto& t = e.graph.tensor(e.sim.live_at_peak[i]);
    out += fmt::format("  {:<40} {:<12} {:>12}\n", format(t.name), to_string(t.category), format_bytes(t.bytes));
  }
  if (const auto ws = e.graph.op(e.sim.peak_op).workspace_bytes; ws > 0)
    out += fmt::format("  {:<40} {:<12} {:>12}\n", "(workspace of " + pr.peak_at + ")", "workspace", format_bytes(ws));

  out += render_timeline(e);
  return out;
}

}  // namespace longctx::cli
