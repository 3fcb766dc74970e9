#include "planner/search/search_order.h"

#include <algorithm>

#include "planner/search/memory_model.h"
#include "planner/search/search.h"
#include "planner/stacks/stack_tiles.h"

namespace longctx::search_detail {

std::vector<KnobValue> knob_values(const Plan& p) {
  std::vector<KnobValue> v;
  for (const Knob& k : knob_table()) v.push_back(knob_value(p, k.id));
  return v;
}

const Verdict* Evaluator::remembered(const Plan& p, const std::vector<KnobValue>& key) const {
  const auto it = verdicts_.find(key);
  const bool hit = it != verdicts_.end() && it->second.parallel == p.parallel && it->second.micro_batch == p.train.micro_batch;
  return hit ? &it->second.verdict : nullptr;
}

Verdict Evaluator::verdict(const Plan& p) {
  std::vector<KnobValue> key = knob_values(p);
  if (const Verdict* known = remembered(p, key)) return *known;
  // Made in place: a verdict's prediction holds a map, copied once here, on return.
  const auto it = verdicts_.insert_or_assign(std::move(key), Remembered{p.parallel, p.train.micro_batch, predict_verdict(p)}).first;
  return it->second.verdict;
}

bool Evaluator::fits_as_allocated_when_run(const Plan& p) {
  std::vector<KnobValue> key = knob_values(p);
  if (judge_by_dominance && remembered(p, key) == nullptr) {
    std::optional<Verdict> v = predict_verdict_unless_prefix_over(p);
    if (!v) {
      // As run() counts a plan over the budget as allocated, whose verdict stops short.
      ++evaluated;
      last_exact = false;
      return false;
    }
    verdicts_.insert_or_assign(std::move(key), Remembered{p.parallel, p.train.micro_batch, std::move(*v)});  // run() finds it
  }
  return fits_as_allocated(run(p));
}

Plan Evaluator::run(Plan p) {
  Verdict v = verdict(p);
  p.prediction = std::move(v.prediction);
  last_exact = v.exact;
  if (p.prediction.feasible) {
    feasible.push_back(p);
    smallest_.reset();
    bounded_.clear();
  } else if (feasible.empty()) {
    track_infeasible(p, v.exact);
  }
  ++evaluated;
  return p;
}

namespace {

// The knobs holds_no_more compares, each at its plain value: what two choices it can order share.
std::vector<KnobValue> sibling_key(const Plan& coarse) {
  Plan p = coarse;
  for (const KnobId id : {KnobId::micro_batch, KnobId::ring_exchange, KnobId::sharding}) set_knob(p, id, knob(id).plain);
  return knob_values(p);
}

// Whether more samples of the plan may hold less: where its stack picks its own tile counts
// (stack_tiles.h: ArcticTraining's, from the tokens), or cannot say, a larger micro-batch may
// run finer tiles; on the CPU virtual device the flash kernel's blocks follow the length.
bool samples_may_hold_less(const Plan& p) {
  if (p.cluster.hardware.backend != Backend::Cuda) return true;
  if (!stack_tiles_defined(p.model, p.train, p.parallel.ulysses)) return true;
  return stack_tile_count(p.model, p.train, p.parallel.ulysses, false).has_value() ||
         stack_tile_count(p.model, p.train, p.parallel.ulysses, true).has_value();
}

// Whether sharding `a` holds no more than sharding `b` (holds_no_more).
bool shards_no_less(const Plan& a, const Plan& b) {
  const Sharding x = a.parallel.sharding, y = b.parallel.sharding;
  if (x == y) return true;
  return x == Sharding::Zero1 && y == Sharding::None;
}

// holds_no_more for two choices already known to share their sibling_key.
bool sibling_holds_no_more(const Plan& a, const Plan& b) {
  const bool exchange = a.parallel.ring_exchange == b.parallel.ring_exchange || a.parallel.ring_exchange == RingExchange::P2p;
  const bool samples = a.train.micro_batch == b.train.micro_batch ||
                       (a.train.micro_batch < b.train.micro_batch && !samples_may_hold_less(a) && !samples_may_hold_less(b));
  return samples && exchange && shards_no_less(a, b) && plan_context_bytes(a) <= plan_context_bytes(b);
}

}  // namespace

void Evaluator::note_does_not_fit(const Plan& coarse) { not_fitting_[sibling_key(coarse)].push_back(coarse); }

bool Evaluator::known_not_to_fit(const Plan& coarse) const {
  if (!judge_by_dominance) return false;
  const auto it = not_fitting_.find(sibling_key(coarse));
  if (it == not_fitting_.end()) return false;
  for (const Plan& d : it->second)
    if (sibling_holds_no_more(d, coarse)) return true;  // the map's key says they are siblings
  return false;
}

namespace {
std::int64_t figure(const Plan& p) { return p.prediction.peak_nvidia_smi_bytes; }
}  // namespace

std::optional<Plan> Evaluator::smallest_infeasible() const {
  using Key = std::pair<std::int64_t, int>;  // (peak, evaluation): the first of the smallest wins
  std::optional<Key> least;
  if (smallest_) least = Key{figure(*smallest_->plan), smallest_->index};
  std::optional<Plan> found = smallest_ ? std::optional<Plan>(*smallest_->plan) : std::nullopt;
  // A bounded plan's figure stops short: its exact one is no less. Settled least bound first,
  // each by a whole evaluation, until a bound's key reaches the least exact key found: that
  // plan's exact key, and every later one's, is no smaller. (Where every plan stops short, as
  // when each one fits as allocated but none as reserved, settling them all took a whole
  // evaluation per plan evaluated: 7,200 for the 70B on 8 GPUs under an 8 GiB budget.)
  std::vector<const Indexed*> by_bound;
  by_bound.reserve(bounded_.size());
  for (const Indexed& b : bounded_) by_bound.push_back(&b);
  std::sort(by_bound.begin(), by_bound.end(), [](const Indexed* a, const Indexed* b) {
    return Key{figure(*a->plan), a->index} < Key{figure(*b->plan), b->index};
  });
  for (const Indexed* b : by_bound) {
    if (least_bound_first() && least && Key{figure(*b->plan), b->index} >= *least) break;
    Plan exact = *b->plan;
    exact.prediction = predict(exact);
    const Key key{figure(exact), b->index};
    if (!least || key < *least) {
      least = key;
      found = exact;
    }
  }
  return found;
}

// Keeps the smallest exact figure so far (the first on ties), and the plans whose figure
// stops short but may still be smaller (a bound under it): settled only if no plan fits.
void Evaluator::track_infeasible(const Plan& p, bool exact) {
  if (exact) {
    if (smallest_ && figure(p) >= figure(*smallest_->plan)) return;
    smallest_ = Indexed{std::make_shared<const Plan>(p), evaluated};
    std::erase_if(bounded_, [&](const Indexed& b) { return figure(*b.plan) > figure(p); });
  } else if (!smallest_ || figure(p) < figure(*smallest_->plan)) {
    bounded_.push_back({std::make_shared<const Plan>(p), evaluated});
  }
}

Evaluator::Mark Evaluator::mark() const { return {evaluated, feasible.size(), last_exact, smallest_, bounded_}; }

void Evaluator::rollback(const Mark& m) {
  evaluated = m.evaluated;
  feasible.resize(m.feasible);
  last_exact = m.last_exact;
  smallest_ = m.smallest;
  bounded_ = m.bounded;
}

CandidateOrder::CandidateOrder(std::vector<Candidate> candidates) : candidates_(std::move(candidates)) {
  std::stable_sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
    return speed(a) > speed(b);
  });
}

double CandidateOrder::speed(const Candidate& c) { return rounded_speed(c.fastest.prediction.tokens_per_s); }

std::size_t CandidateOrder::group_end(std::size_t i) const {
  std::size_t end = i;
  while (end < candidates_.size() && speed(candidates_[end]) == speed(candidates_[i])) ++end;
  return end;
}

const Candidate& CandidateOrder::at(std::size_t i, const std::optional<Plan>& best) {
  if (i >= group_end_) group_end_ = group_end(i);
  if (!stops_at(i, best)) bring_least_forward(i);
  return candidates_[i];
}

// Whether the search stops at place i whichever candidate of the group's rest is there.
bool CandidateOrder::stops_at(std::size_t i, const std::optional<Plan>& best) const {
  if (!best || rounded_speed(best->prediction.tokens_per_s) < speed(candidates_[i])) return false;
  for (std::size_t k = i; k < group_end_; ++k)
    if (candidates_[k].fastest.prediction.feasible || peak(k) <= best->prediction.peak_nvidia_smi_bytes) return false;
  return true;
}

// Moves the candidate of [i, group end) with the least peak (the first on ties) to i; the
// others keep their order.
void CandidateOrder::bring_least_forward(std::size_t i) {
  std::vector<std::size_t> by_bound;
  for (std::size_t k = i; k < group_end_; ++k) by_bound.push_back(k);
  std::stable_sort(by_bound.begin(), by_bound.end(), [&](std::size_t a, std::size_t b) { return peak(a) < peak(b); });
  std::optional<std::size_t> least;
  for (const std::size_t k : by_bound) {
    if (least && peak(k) > peak(*least)) break;  // every bound left is larger still
    if (least && peak(k) == peak(*least) && k > *least) continue;  // at best a tie, which the first wins
    Candidate& c = candidates_[k];
    if (!c.exact) {
      c.fastest.prediction = predict(c.fastest);
      c.exact = true;
    }
    if (!least || peak(k) < peak(*least) || (peak(k) == peak(*least) && k < *least)) least = k;
  }
  const auto first = candidates_.begin() + static_cast<std::ptrdiff_t>(i);
  std::rotate(first, candidates_.begin() + static_cast<std::ptrdiff_t>(*least), candidates_.begin() + static_cast<std::ptrdiff_t>(*least + 1));
}

bool holds_no_more(const Plan& a, const Plan& b) { return sibling_key(a) == sibling_key(b) && sibling_holds_no_more(a, b); }

bool device_holds_no_more(const Plan& a, const Plan& b) {
  const ParallelConfig &x = a.parallel, &y = b.parallel;
  if ((y.offload_optimizer && !x.offload_optimizer) || (y.offload_params && !x.offload_params) ||
      (y.offload_checkpoints && !x.offload_checkpoints))
    return false;
  ParallelConfig same = x;
  same.offload_optimizer = y.offload_optimizer;
  same.offload_params = y.offload_params;
  same.offload_checkpoints = y.offload_checkpoints;
  return same == y && a.train.seq == b.train.seq && a.train.micro_batch == b.train.micro_batch &&
         plan_context_bytes(a) <= plan_context_bytes(b);
}

bool& any_order_allowed() {
  thread_local bool allowed = true;
  return allowed;
}

bool& least_bound_first() {
  thread_local bool allowed = true;
  return allowed;
}

bool& dominance_allowed() {
  thread_local bool allowed = true;
  return allowed;
}

}  // namespace longctx::search_detail
