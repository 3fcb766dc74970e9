#include "longctx/planner/simulator.h"

#include <algorithm>

#include "longctx/planner/allocator_model.h"

namespace longctx {

SimResult simulate(const StepGraph& graph, Backend backend) {
  const auto& tensors = graph.tensors();
  const auto& ops = graph.ops();
  SimResult r;
  r.per_op.resize(ops.size());

  // Tensors freed at the end of each op.
  std::vector<std::vector<int>> frees(ops.size());
  CategoryBytes device{};
  std::int64_t host = 0;
  auto size_of = [&](const TensorSpec& t) {
    return t.place == Place::Device ? allocated_bytes(backend, t.bytes) : t.bytes;
  };
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const auto& t = tensors[static_cast<std::size_t>(i)];
    if (t.producer < 0) {
      if (t.place == Place::Device) device[static_cast<std::size_t>(t.category)] += size_of(t);
      else host += t.bytes;
    }
    if (!t.persistent && t.last_reader >= 0) frees[static_cast<std::size_t>(t.last_reader)].push_back(i);
  }
  auto total = [](const CategoryBytes& c) {
    std::int64_t s = 0;
    for (auto v : c) s += v;
    return s;
  };

  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const auto& op = ops[static_cast<std::size_t>(i)];
    for (int t : op.outputs) {
      const auto& ts = tensors[static_cast<std::size_t>(t)];
      if (ts.place == Place::Device) device[static_cast<std::size_t>(ts.category)] += size_of(ts);
      else host += ts.bytes;
    }
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
    for (int t : frees[static_cast<std::size_t>(i)]) {
      const auto& ts = tensors[static_cast<std::size_t>(t)];
      if (ts.place == Place::Device) device[static_cast<std::size_t>(ts.category)] -= size_of(ts);
      else host -= ts.bytes;
    }
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

}  // namespace longctx
