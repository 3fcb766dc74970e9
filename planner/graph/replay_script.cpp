#include "planner/graph/replay_script.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>

#include "planner/graph/allocator_events.h"

namespace longctx {
namespace {

using Kind = ScriptItem::Kind;

// Turns events into items with the moments the replay notes reserved bytes: once an op's
// outputs and workspace are allocated, before it frees (an op that frees and allocates again
// is noted again before its next allocation), and after the last event. Events come a stretch
// of whole ops at a time: the note owed at a stretch's end is the one the next op's first
// event would have brought.
class ItemWriter {
 public:
  void write(const std::vector<AllocatorEvent>& events, ReplayScript& s) {
    std::vector<ScriptItem>& items = s.items;
    // Room for the stretch; a larger script grows by at least doubling, not copied again for
    // each stretch.
    const std::size_t room = items.size() + events.size() * 5 / 4 + 1;
    if (room > items.capacity()) items.reserve(std::max(room, 2 * items.capacity()));
    // The writer's state in locals while the items are written (a store to an item could
    // otherwise be a store to any of them), stored back after.
    int op = op_, step = step_, blocks = s.blocks, streams = s.streams;
    bool freeing = freeing_;
    auto note = [&] { items.push_back({.kind = Kind::Note, .step = static_cast<std::uint8_t>(step), .op = op}); };
    for (const AllocatorEvent& e : events) {
      if (e.op != op || (e.allocate && freeing)) {
        if (op != -2 && !freeing) note();
        op = e.op;
        step = e.step;
        freeing = false;
      }
      const auto b = static_cast<std::size_t>(e.block);
      if (b >= requested_.size()) requested_.resize(std::max(b + 1, 2 * requested_.size()), -1);  // blocks come in order
      blocks = std::max(blocks, e.block + 1);
      streams = std::max(streams, e.stream + 1);
      if (e.allocate) {
        requested_[b] = static_cast<int>(items.size());
        items.push_back({.kind = Kind::Allocate, .stream = stream_of(e), .op = e.op, .block = e.block, .bytes = e.bytes});
      } else {
        if (!freeing) note();
        freeing = true;
        items.push_back({.kind = Kind::Free, .stream = stream_of(e), .op = e.op, .block = e.block, .request = requested_[b]});
      }
    }
    if (op != -2 && !freeing) note();
    op_ = -2;
    step_ = step;
    freeing_ = false;
    s.blocks = blocks;
    s.streams = streams;
  }

 private:
  static std::int16_t stream_of(const AllocatorEvent& e) { return static_cast<std::int16_t>(e.stream); }

  std::vector<int> requested_;  // block -> its last Allocate item
  int op_ = -2, step_ = 0;
  bool freeing_ = false;
};

// Buffers a writer keeps from one stretch to the next, instead of allocating them for each.
struct Scratch {
  std::vector<int> first_item;       // op - first_op -> its first item in the stretch, -1: none
  std::vector<int> seen;             // distance -> how often
  std::vector<int> frequent;         // the distances seen three times or more
};

// Periods worth trying in items [from, size): the item distances between an op and the last
// two ops of the same kind before it (the same name in another layer or tile, phase and
// stream), the most common first.
std::vector<int> candidate_periods(const StepGraph& g, const ReplayScript& s, int from, Scratch& scratch) {
  // The ops the stretch's items name, a run of one step's ops in order (the writer writes op
  // after op): first_item covers those alone, from the first item that names one to the last.
  auto names_op = [&](int i) {
    const ScriptItem& item = s.items[static_cast<std::size_t>(i)];
    return item.kind != Kind::Note && item.op >= 0;
  };
  const int size = static_cast<int>(s.items.size());
  int first = from, final = size - 1;
  while (first < size && !names_op(first)) ++first;
  while (final > first && !names_op(final)) --final;
  if (first == size) return {};
  const int first_op = s.items[static_cast<std::size_t>(first)].op, last_op = s.items[static_cast<std::size_t>(final)].op;
  std::vector<int>& first_item = scratch.first_item;
  first_item.assign(static_cast<std::size_t>(std::max(0, last_op - first_op + 1)), -1);
  for (int i = final; i >= first; --i) {
    const ScriptItem& item = s.items[static_cast<std::size_t>(i)];
    const int k = item.op - first_op;
    if (item.kind != Kind::Note && k >= 0 && k <= last_op - first_op) first_item[static_cast<std::size_t>(k)] = i;
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
  std::vector<int>& seen = scratch.seen;
  seen.assign(s.items.size() - static_cast<std::size_t>(from) + 1, 0);
  std::vector<int>& frequent = scratch.frequent;
  frequent.clear();
  for (std::size_t k = 0; k < first_item.size(); ++k) {
    if (first_item[k] < 0) continue;
    const OpSpec& op = g.ops()[k + static_cast<std::size_t>(first_op)];
    const Kind key{op.name.base, op.name.recompute, static_cast<int>(op.phase), op.stream, op.layer >= 0};
    auto [it, fresh] = last.try_emplace(key, -1, -1);
    for (const int before : {it->second.first, it->second.second})
      if (before >= 0) {
        const auto distance = static_cast<std::size_t>(first_item[k] - before);
        if (++seen[distance] == 3) frequent.push_back(static_cast<int>(distance));
      }
    it->second = {first_item[k], it->second.first};
  }
  std::vector<std::pair<int, int>> by_count;  // (how often, distance)
  for (const int distance : frequent) by_count.emplace_back(seen[static_cast<std::size_t>(distance)], distance);
  std::sort(by_count.begin(), by_count.end(), std::greater<>());
  std::vector<int> periods;
  for (std::size_t i = 0; i < by_count.size() && i < 4; ++i) periods.push_back(by_count[i].second);
  return periods;
}

// Where a run of a period that divides `p` says every item is alike to the one p after it:
// items [start, end) of a run of period d repeat with every multiple m*d of it up to
// end - (m-1)*d (alike() is an equality). The interval of `runs` holding item j, or none.
std::optional<std::pair<int, int>> implied_run(std::span<const Repeat> runs, int p, int j) {
  for (const Repeat& r : runs) {
    if (p % r.period != 0 || j < r.start) continue;
    const int end = r.end - (p / r.period - 1) * r.period;
    if (j < end) return std::pair{r.start, end};
  }
  return std::nullopt;
}

// The stretches of items [from, size) that repeat with one of the periods, long enough to skip
// some of (three periods: the state may take one to settle, and the replay compares two), the
// longest kept where they overlap.
std::vector<Repeat> find_repeats(const ReplayScript& s, const std::vector<int>& periods, int from) {
  std::vector<Repeat> found;
  const int n = static_cast<int>(s.items.size());
  for (const int p : periods) {
    if (p < 1) continue;
    const std::size_t found_before = found.size();  // the runs of the periods before this one
    // Maximal runs of items alike to the one p after, those of at least 3p kept. Such a run
    // holds one of every 3p consecutive items, so only every 3p-th item is looked at until
    // one is in a run, which is then grown both ways: the same runs as a walk over every item,
    // a fraction of the comparisons where the period does not repeat.
    const int shortest = 3 * p, last = n - p;  // items i < last have an item p after them
    int lo = from;                               // no run still open starts before it
    for (int j = from + shortest - 1; j < last;) {
      if (!alike(s, j, j + p)) {
        lo = j + 1;
        j += shortest;
        continue;
      }
      int start = j, end = j + 1;
      // Inside a run of a period dividing p (a layer's items, where p spans two layers), the
      // items are alike p apart without comparing them again.
      if (const auto implied = implied_run(std::span(found.data(), found_before), p, j)) std::tie(start, end) = *implied;
      while (start > lo && alike(s, start - 1, start - 1 + p)) --start;
      while (end < last && alike(s, end, end + p)) ++end;
      if (end - start >= shortest) found.push_back({start, end, p});
      lo = end + 1;
      j = end + shortest;
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

class ReplayScriptWriter::Impl {
 public:
  explicit Impl(const StepGraph& graph) : graph_(graph), events_writer_(graph) {
    // A step allocates and frees every tensor at most once and a workspace or two per op.
    events_.reserve(2 * (graph.tensors().size() + graph.ops().size()));
  }

  bool append(ReplayScript& s, int end_op) {
    if (events_writer_.steps_written() == 2) return false;
    events_.clear();
    events_writer_.append(events_, end_op);
    const int from = static_cast<int>(s.items.size());
    items_.write(events_, s);
    for (const Repeat& r : find_repeats(s, candidate_periods(graph_, s, from, scratch_), from)) s.repeats.push_back(r);
    return true;
  }

 private:
  const StepGraph& graph_;
  AllocatorEventWriter events_writer_;
  ItemWriter items_;
  std::vector<AllocatorEvent> events_;  // the stretch's, kept for its capacity
  Scratch scratch_;
};

ReplayScriptWriter::ReplayScriptWriter(const StepGraph& graph) : impl_(std::make_unique<Impl>(graph)) {}
ReplayScriptWriter::~ReplayScriptWriter() = default;
bool ReplayScriptWriter::append(ReplayScript& script, int end_op) { return impl_->append(script, end_op); }

bool SharedScript::append(ReplayScript& copy, int end_op, const ResizedWorkspaces& resized) {
  if (copy.items.size() == script_.items.size() && !writer_.append(script_, end_op)) return false;
  const std::size_t from = copy.items.size();
  copy.items.insert(copy.items.end(), script_.items.begin() + static_cast<std::ptrdiff_t>(from), script_.items.end());
  if (!resized.sizes.empty())
    for (std::size_t i = from; i < copy.items.size(); ++i)
      if (ScriptItem& item = copy.items[i]; item.kind == Kind::Allocate)
        if (const std::optional<std::int64_t> bytes = resized.resized(item.bytes)) item.bytes = *bytes;
  copy.repeats.insert(copy.repeats.end(), script_.repeats.begin() + static_cast<std::ptrdiff_t>(copy.repeats.size()),
                      script_.repeats.end());
  copy.blocks = script_.blocks;
  copy.streams = script_.streams;
  return true;
}

ReplayScript replay_script(const StepGraph& graph) {
  ReplayScript s;
  ReplayScriptWriter writer(graph);
  const int ops = static_cast<int>(graph.ops().size());
  while (writer.append(s, ops)) {
  }
  return s;
}

}  // namespace longctx
