#include "planner/graph/simulator.h"

#include <algorithm>

#include "planner/graph/allocator_model.h"

namespace longctx {

SimResult simulate(const StepGraph& graph, Backend backend) {
  const auto& tensors = graph.tensors();
  const auto& ops = graph.ops();
  SimResult r;
  r.per_op.resize(ops.size());

  // Bytes each op allocates and frees, by category (device) and in total (host).
  std::vector<CategoryBytes> alloc_dev(ops.size()), free_dev(ops.size());
  std::vector<std::int64_t> alloc_host(ops.size(), 0), free_host(ops.size(), 0);
  CategoryBytes device{};
  std::int64_t host = 0;
  auto size_of = [&](const TensorSpec& t) {
    return t.place == Place::Device ? allocated_bytes(backend, t.bytes) : t.bytes;
  };
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const auto& t = tensors[static_cast<std::size_t>(i)];
    const auto c = static_cast<std::size_t>(t.category);
    const bool dev = t.place == Place::Device;
    const std::int64_t bytes = size_of(t);
    if (t.producer < 0) {
      if (dev) device[c] += bytes;
      else host += bytes;
    } else {
      if (dev) alloc_dev[static_cast<std::size_t>(t.producer)][c] += bytes;
      else alloc_host[static_cast<std::size_t>(t.producer)] += bytes;
    }
    if (!t.persistent && t.last_reader >= 0) {
      if (dev) free_dev[static_cast<std::size_t>(t.last_reader)][c] += bytes;
      else free_host[static_cast<std::size_t>(t.last_reader)] += bytes;
    }
  }
  auto total = [](const CategoryBytes& c) {
    std::int64_t s = 0;
    for (auto v : c) s += v;
    return s;
  };

  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const auto& op = ops[static_cast<std::size_t>(i)];
    const auto k = static_cast<std::size_t>(i);
    for (int c = 0; c < kCategories; ++c) device[static_cast<std::size_t>(c)] += alloc_dev[k][static_cast<std::size_t>(c)];
    host += alloc_host[k];
    CategoryBytes during = device;
    during[static_cast<std::size_t>(Category::Workspace)] += allocated_bytes(backend, op.workspace_bytes);
    auto& m = r.per_op[static_cast<std::size_t>(i)];
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
    for (int c = 0; c < kCategories; ++c) device[static_cast<std::size_t>(c)] -= free_dev[k][static_cast<std::size_t>(c)];
    host -= free_host[k];
    m.device_after = total(device);
  }

  // The live set at the peak, recomputed from lifetimes.
  if (r.peak_op >= 0) {
    for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
      const auto& t = tensors[static_cast<std::size_t>(i)];
      if (t.place != Place::Device) continue;
      const bool born = t.producer <= r.peak_op;
      const bool alive = t.persistent || t.last_reader >= r.peak_op;
      if (born && alive) r.live_at_peak.push_back(i);
    }
    std::stable_sort(r.live_at_peak.begin(), r.live_at_peak.end(),
                     [&](int a, int b) { return tensors[static_cast<std::size_t>(a)].bytes > tensors[static_cast<std::size_t>(b)].bytes; });
  }
  return r;
}

OpTotals simulate_totals(const StepGraph& graph, Backend backend) {
  const auto& tensors = graph.tensors();
  const auto& ops = graph.ops();
  const std::size_t n = ops.size();
  // delta[i]: bytes allocated at op i's start; freed[i]: bytes freed at its end.
  std::vector<std::int64_t> dev_alloc(n, 0), dev_free(n, 0), host_alloc(n, 0), host_free(n, 0);
  std::int64_t device = 0, host = 0;
  for (const auto& t : tensors) {
    const bool dev = t.place == Place::Device;
    const std::int64_t bytes = dev ? allocated_bytes(backend, t.bytes) : t.bytes;
    if (t.producer < 0) (dev ? device : host) += bytes;
    else (dev ? dev_alloc : host_alloc)[static_cast<std::size_t>(t.producer)] += bytes;
    if (!t.persistent && t.last_reader >= 0) (dev ? dev_free : host_free)[static_cast<std::size_t>(t.last_reader)] += bytes;
  }
  OpTotals r;
  r.device_during.resize(n);
  r.host_during.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    device += dev_alloc[i];
    host += host_alloc[i];
    r.device_during[i] = device + allocated_bytes(backend, ops[i].workspace_bytes);
    r.host_during[i] = host + ops[i].host_workspace_bytes;
    device -= dev_free[i];
    host -= host_free[i];
  }
  return r;
}

}  // namespace longctx
