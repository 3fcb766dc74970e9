#include "planner/graph/simulator.h"

#include <algorithm>

#include "planner/graph/allocator_model.h"

namespace longctx {

namespace {

// Bytes each op allocates at its start and frees at its end, by category on the device and in
// total on the host, and what is live before the first op (tensors no op produces).
struct OpDeltas {
  std::vector<CategoryBytes> alloc_dev, free_dev;
  std::vector<std::int64_t> alloc_host, free_host;
  CategoryBytes device_before{};
  std::int64_t host_before = 0;
};

OpDeltas op_deltas(const StepGraph& graph, Backend backend) {
  const auto& tensors = graph.tensors();
  const std::size_t n = graph.ops().size();
  OpDeltas d{std::vector<CategoryBytes>(n), std::vector<CategoryBytes>(n), std::vector<std::int64_t>(n, 0),
             std::vector<std::int64_t>(n, 0)};
  for (const auto& t : tensors) {
    const auto c = static_cast<std::size_t>(t.category);
    const bool dev = t.place == Place::Device;
    const std::int64_t bytes = dev ? allocated_bytes(backend, t.bytes) : t.bytes;
    if (t.producer < 0) {
      if (dev) d.device_before[c] += bytes;
      else d.host_before += bytes;
    } else {
      if (dev) d.alloc_dev[static_cast<std::size_t>(t.producer)][c] += bytes;
      else d.alloc_host[static_cast<std::size_t>(t.producer)] += bytes;
    }
    if (!t.persistent && t.last_reader >= 0) {
      if (dev) d.free_dev[static_cast<std::size_t>(t.last_reader)][c] += bytes;
      else d.free_host[static_cast<std::size_t>(t.last_reader)] += bytes;
    }
  }
  return d;
}

std::int64_t total(const CategoryBytes& c) {
  std::int64_t s = 0;
  for (auto v : c) s += v;
  return s;
}

// The device tensors live while op `peak_op` runs, largest first.
std::vector<int> live_at(const StepGraph& graph, int peak_op) {
  const auto& tensors = graph.tensors();
  std::vector<int> live;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const auto& t = tensors[static_cast<std::size_t>(i)];
    if (t.place != Place::Device) continue;
    const bool born = t.producer <= peak_op;
    const bool alive = t.persistent || t.last_reader >= peak_op;
    if (born && alive) live.push_back(i);
  }
  std::stable_sort(live.begin(), live.end(),
                   [&](int a, int b) { return tensors[static_cast<std::size_t>(a)].bytes > tensors[static_cast<std::size_t>(b)].bytes; });
  return live;
}

// Hands `visit(op, device, host)` each op's totals while it runs, in order: device bytes as
// allocated, host bytes per rank.
template <class Visit>
void walk_totals(const StepGraph& graph, Backend backend, Visit&& visit) {
  const auto& ops = graph.ops();
  const std::size_t n = ops.size();
  // Bytes allocated at op i's start, and freed at its end: one array, zeroed once.
  struct Deltas {
    std::int64_t alloc_dev, free_dev, alloc_host, free_host;
  };
  std::vector<Deltas> at(n, Deltas{0, 0, 0, 0});
  std::int64_t device = 0, host = 0;
  for (const auto& t : graph.tensors()) {
    const bool dev = t.place == Place::Device;
    const std::int64_t bytes = dev ? allocated_bytes(backend, t.bytes) : t.bytes;
    if (t.producer < 0) (dev ? device : host) += bytes;
    else {
      Deltas& d = at[static_cast<std::size_t>(t.producer)];
      (dev ? d.alloc_dev : d.alloc_host) += bytes;
    }
    if (!t.persistent && t.last_reader >= 0) {
      Deltas& d = at[static_cast<std::size_t>(t.last_reader)];
      (dev ? d.free_dev : d.free_host) += bytes;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    device += at[i].alloc_dev;
    host += at[i].alloc_host;
    visit(i, device + allocated_bytes(backend, ops[i].workspace_bytes), host + ops[i].host_workspace_bytes);
    device -= at[i].free_dev;
    host -= at[i].free_host;
  }
}

// The peaks alone (simulate with per_op false): the totals op by op without categories, the
// first op of the largest device total, then the categories at that op from the tensors live
// there (made at or before it; persistent, never freed, or read at or after it) and its
// workspace. The same figures as the walk by category, at a fraction of its work: the search
// reads only these.
SimResult peaks_only(const StepGraph& graph, Backend backend) {
  SimResult r;
  walk_totals(graph, backend, [&](std::size_t i, std::int64_t device, std::int64_t host) {
    if (device > r.peak_device_bytes || r.peak_op < 0) {
      r.peak_device_bytes = device;
      r.peak_op = static_cast<int>(i);
    }
    if (host > r.peak_host_bytes_per_rank || r.peak_host_op < 0) {
      r.peak_host_bytes_per_rank = host;
      r.peak_host_op = static_cast<int>(i);
    }
  });
  if (r.peak_op < 0) return r;
  const int peak = r.peak_op;
  for (const auto& t : graph.tensors()) {
    if (t.place != Place::Device || t.producer > peak) continue;
    if (!t.persistent && t.last_reader >= 0 && t.last_reader < peak) continue;
    r.breakdown[static_cast<std::size_t>(t.category)] += allocated_bytes(backend, t.bytes);
  }
  r.breakdown[static_cast<std::size_t>(Category::Workspace)] += allocated_bytes(backend, graph.op(peak).workspace_bytes);
  return r;
}

}  // namespace

SimResult simulate(const StepGraph& graph, Backend backend, bool per_op) {
  if (!per_op) return peaks_only(graph, backend);
  const auto& ops = graph.ops();
  SimResult r;
  r.per_op.resize(ops.size());
  OpDeltas d = op_deltas(graph, backend);
  CategoryBytes device = d.device_before;
  std::int64_t host = d.host_before;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const auto& op = ops[static_cast<std::size_t>(i)];
    const auto k = static_cast<std::size_t>(i);
    for (int c = 0; c < kCategories; ++c) device[static_cast<std::size_t>(c)] += d.alloc_dev[k][static_cast<std::size_t>(c)];
    host += d.alloc_host[k];
    CategoryBytes during = device;
    during[static_cast<std::size_t>(Category::Workspace)] += allocated_bytes(backend, op.workspace_bytes);
    OpMemory& m = r.per_op[k];
    m.device_during = total(during);
    m.device_by_category_during = during;
    m.host_during = host + op.host_workspace_bytes;
    if (m.device_during > r.peak_device_bytes || r.peak_op < 0) {
      r.peak_device_bytes = m.device_during;
      r.peak_op = i;
      r.breakdown = during;
    }
    if (m.host_during > r.peak_host_bytes_per_rank || r.peak_host_op < 0) {
      r.peak_host_bytes_per_rank = m.host_during;
      r.peak_host_op = i;
    }
    for (int c = 0; c < kCategories; ++c) device[static_cast<std::size_t>(c)] -= d.free_dev[k][static_cast<std::size_t>(c)];
    host -= d.free_host[k];
    m.device_after = total(device);
  }
  if (r.peak_op >= 0) r.live_at_peak = live_at(graph, r.peak_op);
  return r;
}

StandingBytes standing_bytes(const StepGraph& graph, Backend backend) {
  StandingBytes r;
  for (const auto& t : graph.tensors()) {
    if (t.producer >= 0 || !t.persistent) continue;
    if (t.place == Place::Device) r.device += allocated_bytes(backend, t.bytes);
    else r.host += t.bytes;
  }
  return r;
}

OpTotals simulate_totals(const StepGraph& graph, Backend backend) {
  OpTotals r;
  r.device_during.reserve(graph.ops().size());  // the walk visits every op once, in order
  r.host_during.reserve(graph.ops().size());
  walk_totals(graph, backend, [&](std::size_t, std::int64_t device, std::int64_t host) {
    r.device_during.push_back(device);
    r.host_during.push_back(host);
  });
  return r;
}

OpTotals totals_with_workspaces_of(const StepGraph& variant, const StepGraph& base, const OpTotals& base_totals,
                                   Backend backend) {
  OpTotals r = base_totals;
  const auto &ops = variant.ops(), &base_ops = base.ops();
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].workspace_bytes != base_ops[i].workspace_bytes)  // walk_totals: counted at its op alone
      r.device_during[i] +=
          allocated_bytes(backend, ops[i].workspace_bytes) - allocated_bytes(backend, base_ops[i].workspace_bytes);
  return r;
}

}  // namespace longctx
