#include "planner/graph/replay_script.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "planner/graph/allocator_events.h"

namespace longctx {
namespace {

using Kind = ScriptItem::Kind;

// The events with the moments the replay notes reserved bytes: once an op's outputs and
// workspace are allocated, before it frees (an op that frees and allocates again is noted
// again before its next allocation), and after the last event.
void write_items(const std::vector<AllocatorEvent>& events, ReplayScript& s) {
  s.items.reserve(events.size() * 5 / 4 + 1);
  std::vector<int> requested;  // block -> its last Allocate item
  int op = -2, step = 0;
  bool freeing = false;
  auto note = [&](int at) { s.items.push_back({Kind::Note, 0, at, 0, 0, -1, step}); };
  for (const AllocatorEvent& e : events) {
    if (e.op != op || (e.allocate && freeing)) {
      if (op != -2 && !freeing) note(op);
      op = e.op;
      step = e.step;
      freeing = false;
    }
    const auto b = static_cast<std::size_t>(e.block);
    if (b >= requested.size()) requested.resize(b + 1, -1);
    s.blocks = std::max(s.blocks, e.block + 1);
    s.streams = std::max(s.streams, e.stream + 1);
    if (e.allocate) {
      requested[b] = static_cast<int>(s.items.size());
      s.items.push_back({Kind::Allocate, e.stream, e.op, e.block, e.bytes, -1});
    } else {
      if (!freeing) note(op);
      freeing = true;
      s.items.push_back({Kind::Free, e.stream, e.op, e.block, 0, requested[b]});
    }
  }
  if (!events.empty() && !freeing) note(op);
}

// Periods worth trying: the item distances between an op and the last two ops of the same
// kind before it (the same name in another layer or tile, phase and stream), the most common
// first.
std::vector<int> candidate_periods(const StepGraph& g, const ReplayScript& s) {
  std::vector<int> first_item(g.ops().size(), -1);
  for (int i = static_cast<int>(s.items.size()) - 1; i >= 0; --i) {
    const ScriptItem& item = s.items[static_cast<std::size_t>(i)];
    if (item.kind != Kind::Note && item.op >= 0) first_item[static_cast<std::size_t>(item.op)] = i;
  }
  // An op's kind: its name's base (a literal, compared by address), whether it recomputes,
  // its phase and stream, and whether it belongs to a layer.
  struct Kind {
    const char* base;
    bool recompute;
    int phase, stream;
    bool in_layer;
    bool operator==(const Kind&) const = default;
  };
  struct KindHash {
    std::size_t operator()(const Kind& k) const {
      return std::hash<const void*>{}(k.base) ^ (static_cast<std::size_t>(k.phase) << 1) ^
             (static_cast<std::size_t>(k.stream) << 5) ^ (static_cast<std::size_t>(k.recompute) << 9) ^
             (static_cast<std::size_t>(k.in_layer) << 10);
    }
  };
  std::unordered_map<Kind, std::pair<int, int>, KindHash> last;  // the kind's last two first items
  last.reserve(256);
  std::vector<int> seen(s.items.size() + 1, 0);  // distance -> how often
  for (std::size_t k = 0; k < first_item.size(); ++k) {
    if (first_item[k] < 0) continue;
    const OpSpec& op = g.ops()[k];
    const Kind key{op.name.base, op.name.recompute, static_cast<int>(op.phase), op.stream, op.layer >= 0};
    auto [it, fresh] = last.try_emplace(key, -1, -1);
    for (const int before : {it->second.first, it->second.second})
      if (before >= 0) ++seen[static_cast<std::size_t>(first_item[k] - before)];
    it->second = {first_item[k], it->second.first};
  }
  std::vector<std::pair<int, int>> by_count;  // (how often, distance)
  for (std::size_t distance = 0; distance < seen.size(); ++distance)
    if (seen[distance] >= 3) by_count.emplace_back(seen[distance], static_cast<int>(distance));
  std::sort(by_count.begin(), by_count.end(), std::greater<>());
  std::vector<int> periods;
  for (std::size_t i = 0; i < by_count.size() && i < 4; ++i) periods.push_back(by_count[i].second);
  return periods;
}

// The stretches that repeat with one of the periods, long enough to skip some of (three
// periods: the state may take one to settle, and the replay compares two), the longest kept
// where they overlap.
std::vector<Repeat> find_repeats(const ReplayScript& s, const std::vector<int>& periods) {
  std::vector<Repeat> found;
  const int n = static_cast<int>(s.items.size());
  for (const int p : periods) {
    for (int i = 0; i + p < n;) {
      if (!alike(s, i, i + p)) {
        ++i;
        continue;
      }
      int end = i;
      while (end + p < n && alike(s, end, end + p)) ++end;
      if (end - i >= 3 * p) found.push_back({i, end, p});
      i = end;
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Repeat& a, const Repeat& b) { return a.end + a.period - a.start > b.end + b.period - b.start; });
  std::vector<Repeat> kept;
  for (const Repeat& r : found) {
    const bool overlaps = std::any_of(kept.begin(), kept.end(), [&](const Repeat& k) {
      return r.start < k.end + k.period && k.start < r.end + r.period;
    });
    if (!overlaps) kept.push_back(r);
  }
  std::sort(kept.begin(), kept.end(), [](const Repeat& a, const Repeat& b) { return a.start < b.start; });
  return kept;
}

}  // namespace

bool alike(const ReplayScript& s, int i, int j) {
  const ScriptItem &a = s.items[static_cast<std::size_t>(i)], &b = s.items[static_cast<std::size_t>(j)];
  if (a.kind != b.kind || a.stream != b.stream) return false;
  switch (a.kind) {
    case Kind::Allocate: return a.bytes == b.bytes;
    case Kind::Free: return i - a.request == j - b.request;
    case Kind::Note: return true;
  }
  return false;
}

ReplayScript replay_script(const StepGraph& graph) {
  ReplayScript s;
  write_items(step_allocator_events(graph), s);
  s.repeats = find_repeats(s, candidate_periods(graph, s));
  return s;
}

}  // namespace longctx
