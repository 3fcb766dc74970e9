#include "planner/graph/reserved_replay.h"

#include <array>
#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "planner/graph/replay_repeats.h"
#include "planner/graph/replay_script.h"
#include "planner/graph/work_counts.h"

namespace longctx {
namespace {

using Kind = ScriptItem::Kind;

// Replays a script as its writer writes it, a step at a time: a replay that stops in the
// first step never has the second written.
class Replayer {
 public:
  Replayer(const StepGraph& graph, const AllocatorSettings& settings, const ReplayOptions& options,
           const std::function<void(const ReservedAtOp&)>* at_op = nullptr)
      : graph_(graph), settings_(settings), options_(options), at_op_(at_op) {
    if (options.script_from == nullptr) writer_.emplace(graph);
  }

  ReservedReplay run() {
    std::size_t repeats_done = 0;
    const std::vector<int> cuts = first_step_cuts();
    for (std::size_t stretch = 0; append(stretch < cuts.size() ? cuts[stretch] : kAllOps); ++stretch) {
      if (options_.skip_repeats)
        for (; repeats_done < script_.repeats.size(); ++repeats_done) {
          const Repeat& repeat = script_.repeats[repeats_done];
          if (!replay_until(repeat.start) || !through_repeat(repeat)) return r_;
        }
      if (!replay_until(static_cast<int>(script_.items.size()))) return r_;
    }
    r_.failed_requests = failures();
    return r_;
  }

 private:
  static constexpr int kAllOps = std::numeric_limits<int>::max();

  // Where a replay that stops at its first failure cuts the first step's script, in order:
  // after each of the first two layers of the backward (where the activations' gradients
  // join the checkpoints, and most failed requests of the searches fall, whatever op the step
  // peaks at as allocated), then after the allocated peak. The rest is written only if the
  // replay gets there. A whole replay writes each step at once.
  std::vector<int> first_step_cuts() const {
    std::vector<int> cuts;
    if (!options_.stop_at_failure) return cuts;
    const auto& ops = graph_.ops();
    const int n = static_cast<int>(ops.size());
    int i = 0;
    while (i < n && !(ops[static_cast<std::size_t>(i)].phase == Phase::Backward && ops[static_cast<std::size_t>(i)].layer >= 0)) ++i;
    for (int layers = 0; i < n && layers < 2; ++layers) {
      const int layer = ops[static_cast<std::size_t>(i)].layer;
      while (i < n && ops[static_cast<std::size_t>(i)].layer == layer) ++i;
      if (i < n) cuts.push_back(i);
    }
    if (options_.allocated_peak_op >= 0 && (cuts.empty() || options_.allocated_peak_op + 1 > cuts.back()))
      cuts.push_back(options_.allocated_peak_op + 1);
    return cuts;
  }

  // The items up to op `end_op` of the step being written (kAllOps: the rest of it), with a
  // model for every stream and a slot for every block they name; false when both steps are
  // written.
  bool append(int end_op = kAllOps) {
    const ReplayOptions::ScriptFrom* from = options_.script_from;
    if (!(from != nullptr ? from->shared->append(script_, end_op, from->resized) : writer_->append(script_, end_op)))
      return false;
    models_.resize(static_cast<std::size_t>(script_.streams), CachingAllocatorModel(settings_));
    holder_.resize(static_cast<std::size_t>(script_.streams));
    handle_.resize(static_cast<std::size_t>(script_.blocks), -1);
    return true;
  }

  std::int64_t total(std::int64_t (CachingAllocatorModel::*figure)() const) const {
    std::int64_t sum = 0;
    for (const auto& m : models_) sum += (m.*figure)();
    return sum;
  }
  int failures() const {
    int sum = 0;
    for (const auto& m : models_) sum += m.failures();
    return sum;
  }

  // Reserved bytes as an op's outputs and workspace stand (replay_script.cpp says when).
  void note(int op, int step) {
    if (r_.first_failed_op < 0 && failures() > 0) r_.first_failed_op = op;
    const std::int64_t reserved = total(&CachingAllocatorModel::reserved);
    if (at_op_ != nullptr) (*at_op_)(ReservedAtOp{op, step, reserved});
    if (reserved > r_.peak_reserved) {
      r_.peak_reserved = reserved;
      r_.allocated_at_peak = total(&CachingAllocatorModel::allocated);
      r_.peak_op = op;
    }
  }

  // The stream's model, its capacity what the other streams leave.
  CachingAllocatorModel& on(int stream) {
    auto& m = models_[static_cast<std::size_t>(stream)];
    if (models_.size() > 1) m.set_capacity(settings_.capacity - (total(&CachingAllocatorModel::reserved) - m.reserved()));
    return m;
  }

  // Before a request of `bytes` is made of `m`: its look at the cache, where asked for.
  void look_before(const CachingAllocatorModel& m, std::int64_t bytes) {
    if (options_.look_at_requests) r_.looks.push_back({bytes, m.look()});
  }

  void allocate(int i, const ScriptItem& item) {
    CachingAllocatorModel& m = on(item.stream);
    look_before(m, item.bytes);
    const int failed = m.failures();
    const int handle = m.allocate(item.bytes);
    handle_[static_cast<std::size_t>(item.block)] = handle;
    auto& holders = holder_[static_cast<std::size_t>(item.stream)];
    holders.resize(static_cast<std::size_t>(handle) + 1, -1);
    holders[static_cast<std::size_t>(handle)] = i;
    if (options_.stop_at_failure && m.failures() > failed) {
      const ScriptItem* next = next_note(i);  // where the whole replay would first see the failure
      note(next != nullptr ? next->op : -1, next != nullptr ? next->step : 0);
      r_.failed_requests = failures();
      stopped_ = true;
    }
  }

  // The first note at or after item i that names an op (not the step's start), if any: in a
  // step not written yet too.
  const ScriptItem* next_note(int i) {
    for (;;) {
      for (auto it = script_.items.begin() + i; it != script_.items.end(); ++it)
        if (it->kind == Kind::Note && it->op >= 0) return &*it;
      i = static_cast<int>(script_.items.size());
      if (!append()) return nullptr;
    }
  }

  void replay(int i) {
    const ScriptItem& item = script_.items[static_cast<std::size_t>(i)];
    switch (item.kind) {
      case Kind::Allocate: allocate(i, item); break;
      case Kind::Free: {
        int& handle = handle_[static_cast<std::size_t>(item.block)];
        models_[static_cast<std::size_t>(item.stream)].free(handle);
        handle = -1;
        break;
      }
      case Kind::Note: note(item.op, item.step); break;
    }
  }

  // Replays the items from where it stands up to `end`; false once stopped.
  bool replay_until(int end) {
    for (; next_ < end && !stopped_; ++next_) {
      if (options_.skip_transients && script_.items[static_cast<std::size_t>(next_)].kind == Kind::Allocate &&
          replay_transient(end))
        continue;
      replay(next_);
      ++r_.replayed_items;
    }
    return !stopped_;
  }

  // Where the request at next_ is returned by the next item that is not a note, before `end`,
  // and a cached block serves it: the request, the notes and the return, with the model's
  // blocks left as they are (CachingAllocatorModel::hold_transient). Leaves next_ at the
  // return; false, with nothing replayed, otherwise.
  bool replay_transient(int end) {
    const int request = next_;
    int back = request + 1;
    while (back < end && script_.items[static_cast<std::size_t>(back)].kind == Kind::Note) ++back;
    if (back >= end) return false;
    const ScriptItem& returned = script_.items[static_cast<std::size_t>(back)];
    if (returned.kind != Kind::Free || returned.request != request) return false;
    const ScriptItem& item = script_.items[static_cast<std::size_t>(request)];
    CachingAllocatorModel& m = models_[static_cast<std::size_t>(item.stream)];
    look_before(m, item.bytes);
    const std::int64_t booked = m.hold_transient(item.bytes);
    if (booked == 0) return false;
    for (int i = request + 1; i < back; ++i) {
      const ScriptItem& n = script_.items[static_cast<std::size_t>(i)];
      note(n.op, n.step);
    }
    m.return_transient(booked);
    ++r_.transient_requests;
    r_.replayed_items += back - request + 1;
    next_ = back;
    return true;
  }

  // Replays a repeated stretch period by period, comparing the state at each boundary with
  // the one 1 to 4 periods before (a state may repeat every second layer where the requests
  // repeat every layer), and jumps to the stretch's end at the first that repeats. False
  // once stopped.
  bool through_repeat(const Repeat& rep);
  // The jump: blocks held by a request of the last `period` items before next_ are held by
  // the one `skipped` items later.
  void jump(int period, int skipped);

  const StepGraph& graph_;
  std::optional<ReplayScriptWriter> writer_;  // the script's, where it is not read from options_.script_from
  ReplayScript script_;
  AllocatorSettings settings_;
  ReplayOptions options_;
  const std::function<void(const ReservedAtOp&)>* at_op_;  // null: nothing sees the notes
  std::vector<CachingAllocatorModel> models_;  // one a stream
  std::vector<int> handle_;                    // block -> the handle its model gave it, -1 when not held
  std::vector<std::vector<int>> holder_;       // stream -> handle -> the Allocate item that requested it
  int next_ = 0;                          // the next item to replay
  bool stopped_ = false;
  ReservedReplay r_;
};

bool Replayer::through_repeat(const Repeat& rep) {
  constexpr int kMultiples = 4, kTries = 8;
  std::array<ReplayState, kMultiples + 1> states;  // the last boundaries', by try % size
  // A boundary's state is described (at the cost of the blocks held) only at the stretch's
  // start and where the bytes reserved and allocated did not change over the period before
  // it: they are part of the state, so while they grow (every layer keeping its activations)
  // no state repeats. A state not described is never compared: a skip missed at most, never
  // a wrong one.
  std::array<std::pair<std::int64_t, std::int64_t>, kMultiples + 1> bytes{};  // (reserved, allocated)
  const int p = rep.period;
  for (int t = 0; t < kTries && next_ <= rep.end; ++t) {
    const auto slot = static_cast<std::size_t>(t % states.size());
    ReplayState& now = states[slot];
    bytes[slot] = {total(&CachingAllocatorModel::reserved), total(&CachingAllocatorModel::allocated)};
    const bool steady = t == 0 || bytes[slot] == bytes[static_cast<std::size_t>((t - 1) % states.size())];
    now.at = -1;
    if (steady) describe_replay_state(models_, holder_, next_, now);
    for (int m = 1; steady && m <= kMultiples && m <= t; ++m) {
      const ReplayState& before = states[static_cast<std::size_t>((t - m) % states.size())];
      const int q = m * p, end = rep.end - (m - 1) * p;  // items [rep.start, end) repeat with period q
      if (before.at < 0 || before.at + q > end || !same_replay_state(before, now, q)) continue;
      jump(q, (end - before.at) / q * q);
      return true;
    }
    if (!replay_until(next_ + p)) return false;
  }
  return true;
}

void Replayer::jump(int period, int skipped) {
  std::vector<std::pair<int, int>> moved;  // (stream, handle)
  for (std::size_t s = 0; s < models_.size(); ++s) {
    std::vector<int>& holders = holder_[s];
    models_[s].for_each_held([&](int handle) {
      int& item = holders[static_cast<std::size_t>(handle)];
      if (item < next_ - period) return;
      handle_[static_cast<std::size_t>(script_.items[static_cast<std::size_t>(item)].block)] = -1;
      item += skipped;
      moved.emplace_back(static_cast<int>(s), handle);
    });
  }
  for (const auto& [s, handle] : moved) {
    const int item = holder_[static_cast<std::size_t>(s)][static_cast<std::size_t>(handle)];
    handle_[static_cast<std::size_t>(script_.items[static_cast<std::size_t>(item)].block)] = handle;
  }
  next_ += skipped;
  r_.skipped_items += skipped;
}

}  // namespace

namespace {

ReservedReplay counted_replay(const StepGraph& graph, const AllocatorSettings& settings, const ReplayOptions& options,
                              const std::function<void(const ReservedAtOp&)>* at_op) {
  const ReservedReplay r = Replayer(graph, settings, options, at_op).run();
  WorkCounts& counts = work_counts();
  ++counts.replays;
  counts.replayed_items += r.replayed_items;
  counts.skipped_items += r.skipped_items;
  return r;
}

}  // namespace

std::uint64_t variants_alike(const std::vector<RequestLook>& looks, std::span<const ResizedWorkspaces> variants,
                             const AllocatorSettings& settings) {
  if (!settings.splits_every_block()) return 0;
  std::uint64_t alike = 0;
  for (std::size_t v = 0; v < variants.size() && v < 64; ++v) {
    bool served = true;
    for (const RequestLook& look : looks)
      if (const std::optional<std::int64_t> resized = variants[v].resized(look.bytes))
        if (!(look.cache.serves(look.bytes) && look.cache.serves(*resized))) {
          served = false;
          break;
        }
    if (served) alike |= std::uint64_t{1} << v;
  }
  return alike;
}

ReservedReplay replay_reserved(const StepGraph& graph, const AllocatorSettings& settings, const ReplayOptions& options) {
  return counted_replay(graph, settings, options, nullptr);
}

ReservedReplay replay_reserved(const StepGraph& graph, const AllocatorSettings& settings,
                               const std::function<void(const ReservedAtOp&)>& at_op) {
  // Every note is seen: no stretch skipped.
  return counted_replay(graph, settings, {.stop_at_failure = false, .skip_repeats = false}, &at_op);
}

}  // namespace longctx
