#include "planner/graph/cost_model.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "planner/core/phase_names.h"

namespace longctx {
namespace {

bool is_attention(const OpSpec& op) { return op.kind == OpKind::Attention; }
bool is_recompute(const OpSpec& op) { return op.name.recompute; }
// The flops that take time: the kernel's work where it exceeds the model's.
double timed_flops(const OpSpec& op) { return op.kernel_flops > 0 ? op.kernel_flops : op.flops; }

// Seconds of one collective or copy.
double comm_seconds(const Plan& p, const OpSpec& op, const StepEfficiency& eff) {
  const Hardware& hw = p.cluster.hardware;
  switch (op.comm) {
    case CommKind::None: return 0;
    case CommKind::HostToDevice:
    case CommKind::DeviceToHost: return op.comm_bytes / (hw.pcie_bytes_per_s * eff.link);
    default: break;
  }
  // A group within one node rides NVLink; one that spans nodes is bound by the network.
  const bool inside_node = op.comm_group <= p.cluster.shape.gpus_per_node;
  const double bw = inside_node ? hw.nvlink_bytes_per_s : hw.internode_bytes_per_s;
  return op.comm_bytes / (bw * eff.link);
}

// The totals, the tokens per second and the MFU from the parts.
void finish(const Plan& p, StepTime& t) {
  t.total_s = t.compute_s + t.exposed_comm_s + t.host_optimizer_s;
  const std::int64_t dp = p.cluster.shape.world() / sequence_ranks(p.parallel);
  const double tokens = double(p.train.micro_batch) * double(p.train.seq) * double(dp);
  t.tokens_per_s = t.total_s > 0 ? tokens / t.total_s : 0;
  t.mfu = t.total_s > 0 ? t.model_flops / (t.total_s * p.cluster.hardware.peak_flops) : 0;
}

// Of an op's `comm` seconds, those that may hide behind compute: all of an exchange the step
// does not wait for (a prefetch, a side stream), else the share of its bytes that travel
// while the op itself computes. An exchange the rank waits for is exposed.
double hidden_share(const OpSpec& op, double comm) {
  if (op.comm_async) return comm;
  return op.comm_bytes > 0 ? comm * op.overlapped_comm_bytes / op.comm_bytes : 0;
}

// With measured rates (`longctx calibrate`): each op on its own roofline at the rates its
// kind reached on the machine, plus its launches at the measured cost of a small op; and
// which of the roofline's terms bound it (phase_op_times reports it). Named nothing: the
// search evaluates it for every op of every plan it tries.
struct OpSeconds {
  double seconds = 0;
  const char* bound = "";
};

OpSeconds measured_op_seconds(const Plan& p, const StepGraph& g, const OpSpec& op, const MeasuredRates& m) {
  // An op that records no traffic of its own reads its inputs and writes its outputs once.
  double traffic = op.memory_bytes;
  if (traffic == 0) {
    for (int t : op.inputs) traffic += double(g.tensor(t).bytes);
    for (int t : op.outputs) traffic += double(g.tensor(t).bytes);
  }
  double compute = 0;
  if (is_attention(op))
    compute = timed_flops(op) / (op.phase == Phase::Backward && !is_recompute(op) ? m.attention_backward : m.attention_forward)
                                    .at(p.model.head_dim);
  else
    compute = timed_flops(op) / (p.train.dtype == DType::BF16 ? m.matmul_bf16_flops : m.matmul_fp32_flops);
  const double memory = traffic / m.memory_bytes_per_s;
  const double transcendental =
      m.transcendental_elems_per_s > 0 ? op.transcendentals / m.transcendental_elems_per_s : 0.0;
  const double longest = std::max({compute, memory, transcendental});
  const char* bound = longest == 0           ? "launches"
                      : longest == compute   ? (is_attention(op) ? "attention" : "flops")
                      : longest == memory    ? "memory"
                                             : "transcendental";
  return {longest + op.launches * m.op_overhead_s, bound};
}

// An op on the host (the offloaded optimizer's update): bound by its passes over host memory
// at the host's measured rate, plus its launches.
double measured_host_op_seconds(const OpSpec& op, const MeasuredRates& m) {
  return op.memory_bytes / m.host_rate() + op.launches * m.op_overhead_s;
}

double measured_comm_seconds(const OpSpec& op, const MeasuredRates& m) {
  switch (op.comm) {
    case CommKind::None: return 0;
    case CommKind::HostToDevice:
    case CommKind::DeviceToHost: return op.comm_bytes / m.copy_bytes_per_s;
    case CommKind::AllReduce: return op.comm_bytes / m.all_reduce_rate() + op.launches * m.collective_latency_s;
    default: return op.comm_bytes / m.collective_bytes_per_s + op.launches * m.collective_latency_s;
  }
}

// A segment: the ops of one phase of one layer (backward outside the layers split into the
// loss's and the embedding's, as the runtime times them). Overlap of side streams happens
// inside a segment.
struct SegmentKey {
  int phase = 0, layer = 0;
  bool embed = false;
};

SegmentKey segment_of(const OpSpec& op) {
  return {static_cast<int>(op.phase), op.layer, op.layer < 0 && op.name.scope == Name::kEmbed};
}

// The graph's ops by segment: `visit(op, its segment's Segment)`, each Segment made on its
// first op (whose index it keeps in `first_op`), in schedule order within a segment. The
// segments come back in SegmentKey's order (phase, layer from -1, embed), the order the step's
// times are summed in: a table by phase, layer and embed, not a map (the search prices
// thousands of graphs, each a few hundred segments).
template <class Segment>
struct Segments {
  std::vector<Segment> table;  // by slot(); first_op < 0: no op there
  template <class Each>
  void for_each(Each each) const {
    for (const Segment& s : table)
      if (s.first_op >= 0) each(s);
  }
};

template <class Segment, class Visit>
Segments<Segment> by_segment(const StepGraph& g, Visit visit) {
  int layers = 0;
  for (const OpSpec& op : g.ops()) layers = std::max(layers, op.layer + 1);
  const auto slot = [&](const SegmentKey& k) {
    return (static_cast<std::size_t>(k.phase) * static_cast<std::size_t>(layers + 1) + static_cast<std::size_t>(k.layer + 1)) * 2 +
           (k.embed ? 1 : 0);
  };
  constexpr int kPhases = static_cast<int>(Phase::Optimizer) + 1;
  Segment unused{};
  unused.first_op = -1;
  Segments<Segment> segments{std::vector<Segment>(static_cast<std::size_t>(kPhases * (layers + 1) * 2), unused)};
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    const OpSpec& op = g.ops()[i];
    Segment& s = segments.table[slot(segment_of(op))];
    if (s.first_op < 0) s.first_op = static_cast<int>(i);
    visit(op, s);
  }
  return segments;
}

// Seconds of each segment (its compute plus its exposed exchanges) and of the host
// optimizer, summed into `t`; `on_segment(first op of the segment, seconds)` sees each.
template <class OnSegment>
void datasheet_time(const Plan& p, const StepGraph& g, const StepEfficiency& eff, StepTime& t, OnSegment on_segment) {
  const Hardware& hw = p.cluster.hardware;
  // A segment's compute is its roofline, the larger of its FLOPs and its memory traffic at
  // their rates, plus its launches.
  struct Segment { int first_op = 0; double matmul_flops = 0, attention_flops = 0, bytes = 0, launches = 0, hidden_comm = 0, exposed_comm = 0; };
  const auto segments = by_segment<Segment>(g, [&](const OpSpec& op, Segment& s) {
    if (op.host_compute) {
      // AdamW on the host is bound by reading and writing its states.
      t.host_optimizer_s += op.memory_bytes / (hw.host_flops * 4 * eff.memory) + op.flops / hw.host_flops;
      if (op.comm != CommKind::None) s.exposed_comm += comm_seconds(p, op, eff);
      return;
    }
    (is_attention(op) ? s.attention_flops : s.matmul_flops) += timed_flops(op);
    s.bytes += op.memory_bytes;
    s.launches += op.launches;
    if (!is_recompute(op) && op.phase != Phase::Optimizer) t.model_flops += op.flops;
    if (op.comm == CommKind::None) return;
    const double comm = comm_seconds(p, op, eff), hidden = hidden_share(op, comm);
    s.hidden_comm += hidden;
    s.exposed_comm += comm - hidden;
  });
  segments.for_each([&](const Segment& s) {
    const double flops_s = s.matmul_flops / (hw.peak_flops * eff.matmul) + s.attention_flops / (hw.peak_flops * eff.attention);
    const double compute = std::max(flops_s, s.bytes / (hw.hbm_bytes_per_s * eff.memory)) + s.launches * eff.launch_s;
    const double exposed = s.exposed_comm + std::max(0.0, s.hidden_comm - compute);
    t.compute_s += compute;
    t.exposed_comm_s += exposed;
    on_segment(s.first_op, compute + exposed);
  });
}

// Whether the step's ranks meet at an exchange each waits for (a collective across ranks the
// step does not issue on a side stream): there the faster ranks wait for the slowest.
bool ranks_synchronize(const StepGraph& g) {
  for (const OpSpec& op : g.ops())
    if (op.comm != CommKind::None && op.comm != CommKind::HostToDevice && op.comm != CommKind::DeviceToHost &&
        op.comm_group > 1 && !op.comm_async)
      return true;
  return false;
}

// As datasheet_time, each op at the rates measured on the machine (estimate_measured_step_time).
// Where the ranks synchronize, every segment's compute is followed by the wait for the slowest
// rank (MeasuredRates::rank_lag of it), counted as exposed exchange time: each synchronous
// exchange ends when the slowest rank reaches it, and one is never far ahead (a layer's
// all-to-alls, a ring's hops, the gradients' reductions).
template <class OnSegment>
void measured_time(const Plan& p, const StepGraph& g, StepTime& t, OnSegment on_segment) {
  const MeasuredRates& m = p.cluster.hardware.measured;
  const double lag = m.rank_lag > 0 && ranks_synchronize(g) ? m.rank_lag : 0.0;
  struct Segment { int first_op = 0; double compute = 0, hidden_comm = 0, exposed_comm = 0; };
  const auto segments = by_segment<Segment>(g, [&](const OpSpec& op, Segment& s) {
    const double comm = measured_comm_seconds(op, m);
    if (op.host_compute) {
      t.host_optimizer_s += measured_host_op_seconds(op, m);
      s.exposed_comm += comm;
      return;
    }
    s.compute += measured_op_seconds(p, g, op, m).seconds;
    if (!is_recompute(op) && op.phase != Phase::Optimizer) t.model_flops += op.flops;
    const double hidden = hidden_share(op, comm);
    s.hidden_comm += hidden;
    s.exposed_comm += comm - hidden;
  });
  segments.for_each([&](const Segment& s) {
    const double exposed = s.exposed_comm + std::max(0.0, s.hidden_comm - s.compute) + lag * s.compute;
    t.compute_s += s.compute;
    t.exposed_comm_s += exposed;
    on_segment(s.first_op, s.compute + exposed);
  });
}

void ignore_segment(int, double) {}

}  // namespace

StepTime estimate_step_time(const Plan& p, const StepGraph& g, const StepEfficiency& eff) {
  if (p.cluster.hardware.measured.present) return estimate_measured_step_time(p, g);
  StepTime t;
  datasheet_time(p, g, eff, t, ignore_segment);
  finish(p, t);
  return t;
}

StepTime estimate_measured_step_time(const Plan& p, const StepGraph& g) {
  StepTime t;
  measured_time(p, g, t, ignore_segment);
  finish(p, t);
  return t;
}

std::map<std::string, double> phase_step_times(const Plan& p, const StepGraph& g, const StepEfficiency& eff) {
  std::map<std::string, double> out;
  auto add = [&](int first_op, double seconds) { out[phase_of(g.ops()[static_cast<std::size_t>(first_op)])] += seconds; };
  StepTime t;
  if (p.cluster.hardware.measured.present)
    measured_time(p, g, t, add);
  else
    datasheet_time(p, g, eff, t, add);
  if (t.host_optimizer_s > 0) out[phase_name(StepPhase::Optimizer)] += t.host_optimizer_s;
  return out;
}

std::map<std::string, std::vector<OpTime>> phase_op_times(const Plan& p, const StepGraph& g) {
  std::map<std::string, std::vector<OpTime>> out;
  const MeasuredRates& m = p.cluster.hardware.measured;
  if (!m.present) return out;
  for (const OpSpec& op : g.ops()) {
    OpTime t;
    t.op = format(op.name);
    t.launches = op.launches;
    t.comm_s = measured_comm_seconds(op, m);
    // The host optimizer's time counts in "optimizer", as phase_step_times counts it.
    const OpSeconds own = op.host_compute ? OpSeconds{measured_host_op_seconds(op, m), "memory"}
                                          : measured_op_seconds(p, g, op, m);
    t.compute_s = own.seconds;
    t.bound = own.bound;
    out[op.host_compute ? phase_name(StepPhase::Optimizer) : phase_of(op)].push_back(std::move(t));
  }
  return out;
}

std::map<std::string, std::int64_t> phase_collective_calls(const StepGraph& g) {
  std::map<std::string, std::int64_t> out;
  for (const OpSpec& op : g.ops())
    if (op.comm == CommKind::AllToAll || op.comm == CommKind::AllGather || op.comm == CommKind::ReduceScatter ||
        op.comm == CommKind::AllReduce)
      out[phase_of(op)] += op.launches;
  return out;
}

}  // namespace longctx
