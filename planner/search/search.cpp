#include "planner/search/search.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/search/length_refusals.h"
#include "planner/search/memory_model.h"
#include "planner/core/units.h"
#include "planner/search/search_space.h"

namespace longctx {
namespace {

// Runs and counts evaluations (predict_verdict: a plan that does not fit may have a reserved
// figure that stops short); keeps the feasible plans and, while none fits, what no_fit needs
// to name the plan of the smallest peak.
struct Evaluator {
  int evaluated = 0;
  std::vector<Plan> feasible;
  bool last_exact = true;  // whether the last plan run has predict()'s figures

  Plan run(Plan p) {
    const Verdict v = predict_verdict(p);
    p.prediction = v.prediction;
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

  // The first plan evaluated of the smallest nvidia-smi peak, among those that do not fit (none
  // if a plan fits). REQUIRES: no plan fits.
  std::optional<Plan> smallest_infeasible() const {
    std::optional<std::pair<std::int64_t, int>> least;  // (peak, evaluation)
    if (smallest_) least = {{figure(smallest_->plan), smallest_->index}};
    std::optional<Plan> found = smallest_ ? std::optional<Plan>(smallest_->plan) : std::nullopt;
    for (const Indexed& b : bounded_) {
      Plan exact = b.plan;
      exact.prediction = predict(exact);
      const std::pair<std::int64_t, int> key{figure(exact), b.index};
      if (!least || key < *least) {
        least = key;
        found = exact;
      }
    }
    return found;
  }

 private:
  struct Indexed {
    Plan plan;
    int index = 0;  // the evaluation's
  };
  static std::int64_t figure(const Plan& p) { return p.prediction.peak_nvidia_smi_bytes; }

  // Keeps the smallest exact figure so far (the first on ties), and the plans whose figure
  // stops short but may still be smaller (a bound under it): settled only if no plan fits.
  void track_infeasible(const Plan& p, bool exact) {
    if (exact) {
      if (smallest_ && figure(p) >= figure(smallest_->plan)) return;
      smallest_ = Indexed{p, evaluated};
      std::erase_if(bounded_, [&](const Indexed& b) { return figure(b.plan) > figure(p); });
    } else if (!smallest_ || figure(p) < figure(smallest_->plan)) {
      bounded_.push_back({p, evaluated});
    }
  }

  std::optional<Indexed> smallest_;
  std::vector<Indexed> bounded_;
};

}  // namespace

// Differences below three digits are inside the cost model's error, and should not buy a plan
// that needs more memory. Rounding is monotone, so the search's bounds still hold.
double rounded_speed(double tokens_per_s) {
  if (tokens_per_s <= 0) return 0;
  const double scale = std::pow(10.0, std::floor(std::log10(tokens_per_s)) - 2);
  return std::round(tokens_per_s / scale) * scale;
}

bool faster(const Plan& a, const Plan& b) {
  const double sa = rounded_speed(a.prediction.tokens_per_s), sb = rounded_speed(b.prediction.tokens_per_s);
  if (sa != sb) return sa > sb;
  return a.prediction.peak_nvidia_smi_bytes < b.prediction.peak_nvidia_smi_bytes;
}

namespace {

// `untried`: the plans a length rule kept from being evaluated (LengthRefusals::explain), or "".
Error no_fit(const Plan& base, const std::optional<Plan>& smallest, const std::string& untried) {
  const std::string also = untried.empty() ? "" : "; " + untried;
  if (!smallest)
    return Error{ErrorKind::NoFit, "--seq", fmt::format("no valid configuration for {} tokens on {} GPUs{}", base.train.seq,
                                                        base.cluster.shape.world(), also)};
  const Evaluation e = evaluate(smallest->prediction.feasible ? base : *smallest);
  std::string dominant;
  std::int64_t most = -1;
  for (const auto& [k, v] : e.plan.prediction.breakdown)
    if (v > most) { most = v; dominant = k; }
  const auto& pr = e.plan.prediction;
  if (pr.binding == "host memory")
    return Error{ErrorKind::NoFit, "--host-mem",
                 fmt::format("no plan fits: the smallest device peak found fits, but needs {} of host memory per node, "
                             "budget {}{}", format_bytes(pr.peak_host_bytes), format_bytes(base.cluster.host_budget_bytes_per_node),
                             also)};
  return Error{ErrorKind::NoFit, "--budget",
               fmt::format("no plan fits: the smallest peak is {} ({} allocated at op {}; {} dominates: {}), budget {}; "
                           "allow more techniques, more GPUs, or a shorter --seq{}",
                           format_bytes(pr.peak_nvidia_smi_bytes), format_bytes(pr.peak_device_bytes), pr.peak_at,
                           dominant, format_bytes(most), format_bytes(base.cluster.device_budget_bytes), also)};
}

}  // namespace

namespace {

// A choice of the coarse knobs and its fastest plan (fine knobs at their fixed or plain
// values): an upper bound on the speed of every plan with that choice.
struct Candidate {
  Plan coarse;
  Plan fastest;
  bool exact = true;  // whether `fastest` has predict()'s figures (Evaluator::run)
};

// Candidates in faster()'s order, fastest first (stable: equals in the order given). faster()
// ranks equally fast plans by their peaks, which for candidates that do not fit may stop
// short (Evaluator::run: a lower bound, over the budget). The order within a group of equally
// fast candidates is settled as the search reaches each place: the least peak of those left,
// settling a peak only where its bound could be the least, and none where the search stops
// there whichever candidate it is (the best plan found is as fast, and needs less memory than
// any bound left).
class CandidateOrder {
 public:
  explicit CandidateOrder(std::vector<Candidate> candidates) : candidates_(std::move(candidates)) {
    std::stable_sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
      return speed(a) > speed(b);
    });
  }
  // The i-th candidate in faster()'s order. REQUIRES: i < size(), the candidates before it
  // asked for first, and `best` (the fastest plan found that fits) the search's.
  const Candidate& at(std::size_t i, const std::optional<Plan>& best) {
    if (i >= group_end_) {
      group_end_ = i;
      while (group_end_ < candidates_.size() && speed(candidates_[group_end_]) == speed(candidates_[i])) ++group_end_;
    }
    if (!stops_at(i, best)) bring_least_forward(i);
    return candidates_[i];
  }
  std::size_t size() const { return candidates_.size(); }

 private:
  static double speed(const Candidate& c) { return rounded_speed(c.fastest.prediction.tokens_per_s); }
  std::int64_t peak(std::size_t k) const { return candidates_[k].fastest.prediction.peak_nvidia_smi_bytes; }

  // Whether the search stops at place i whichever candidate of the group's rest is there.
  bool stops_at(std::size_t i, const std::optional<Plan>& best) const {
    if (!best || rounded_speed(best->prediction.tokens_per_s) < speed(candidates_[i])) return false;
    for (std::size_t k = i; k < group_end_; ++k)
      if (candidates_[k].fastest.prediction.feasible || peak(k) <= best->prediction.peak_nvidia_smi_bytes) return false;
    return true;
  }

  // Moves the candidate of [i, group end) with the least peak (the first on ties) to i; the
  // others keep their order.
  void bring_least_forward(std::size_t i) {
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

  std::vector<Candidate> candidates_;
  std::size_t group_end_ = 0;  // the end of the group of equally fast candidates reached last
};

// The fine rows' candidates for one coarse choice, each fastest first, in table order
// (fine_knobs()). The search nests them in that order, by search.h's bounds: the first (the
// head chunk) outermost, each of its values tried, as chunking is monotone only among chunked
// plans; then a staircase over the other two (MLP and loss tiles), the last bisected.
static_assert(kFineKnobs == 3, "search_fine nests three fine rows: a head chunk, then two tile counts");
using FineOptions = std::array<std::vector<KnobValue>, kFineKnobs>;

FineOptions fine_options(const Plan& shape, const TechniqueSet& allowed, const Knobs& fixed) {
  FineOptions o;
  for (std::size_t i = 0; i < kFineKnobs; ++i) o[i] = knob_candidates(fine_knobs()[i], shape, allowed, fixed);
  return o;
}

// An evaluated plan's fit as allocated (memory_model.h): what the search prunes on.
bool fits_as_allocated(const Plan& p) {
  return fits_as_allocated(p, p.prediction.peak_device_bytes, p.prediction.peak_host_bytes);
}

// Staircase over (mlp tiles, loss tiles) at one chunk: for each MLP tile count, the fewest
// loss tiles that fit as allocated (binary search: that is monotone in tiles), then from
// there the first count that fits as reserved too. The allocated step can only fall as MLP
// tiles rise, and more tiles are never faster.
void staircase(const Plan& c, KnobValue chunk, const FineOptions& o, Evaluator& ev, std::optional<Plan>& best) {
  const auto& [chunks, mlps, losses] = o;
  const int last = static_cast<int>(losses.size()) - 1;
  int hi = last;
  for (KnobValue mlp : mlps) {
    if (!fits_as_allocated(ev.run(with_fine(c, {chunk, mlp, losses[static_cast<std::size_t>(hi)]})))) continue;
    int lo = 0;  // losses[lo - 1] does not fit as allocated (or lo == 0); losses[hi] does
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (fits_as_allocated(ev.run(with_fine(c, {chunk, mlp, losses[static_cast<std::size_t>(mid)]})))) hi = mid;
      else lo = mid + 1;
    }
    for (int j = hi; j <= last; ++j) {
      const Plan p = ev.run(with_fine(c, {chunk, mlp, losses[static_cast<std::size_t>(j)]}));
      if (!p.prediction.feasible) continue;
      if (!best || faster(p, *best)) best = p;
      if (j == 0) return;  // the fewest tiles of all fit: more MLP tiles only slow it down
      break;
    }
  }
}

// Searches the fine knobs of one coarse choice, updating `best`.
void search_fine(const Candidate& cand, const TechniqueSet& allowed, const Knobs& fixed, Evaluator& ev,
                 std::optional<Plan>& best) {
  const Plan& c = cand.coarse;
  const FineOptions o = fine_options(cand.fastest, allowed, fixed);
  const auto& [chunks, mlps, losses] = o;
  // Bound 1: the most memory-saving fine knobs must fit as allocated: the most tiles, with the
  // smallest chunk or with none (chunking is monotone only among chunked plans).
  bool any_fits = fits_as_allocated(ev.run(with_fine(c, {chunks.back(), mlps.back(), losses.back()})));
  if (!any_fits && chunks.back() != chunks.front())
    any_fits = fits_as_allocated(ev.run(with_fine(c, {chunks.front(), mlps.back(), losses.back()})));
  if (!any_fits) return;
  // Speed only falls as the chunk shrinks or tiles grow, so a plan that cannot beat the
  // best one ends its row (more loss tiles) or its whole chunk (more MLP tiles too).
  for (KnobValue chunk : chunks) {
    // The chunk's fastest plan (fewest tiles) cannot win: smaller chunks are slower still.
    const Plan head = ev.run(with_fine(c, {chunk, mlps.front(), losses.front()}));
    if (best && !faster(head, *best)) {
      if (chunk != 0) break;
      continue;
    }
    if (head.prediction.feasible) {
      best = head;
      continue;
    }
    staircase(c, chunk, o, ev, best);
  }
}

// Every knob's value, in the table's order: one order on plans that faster() finds equal.
std::vector<KnobValue> knob_values(const Plan& p) {
  std::vector<KnobValue> v;
  for (const Knob& k : knob_table()) v.push_back(knob_value(p, k.id));
  return v;
}

bool same_choice(const Plan& a, const Plan& b) { return a.parallel == b.parallel && a.train.micro_batch == b.train.micro_batch; }

SearchResult summarize(const Plan& best, Evaluator& ev) {
  SearchResult r;
  r.best = best;
  r.evaluated = ev.evaluated;
  // Fastest first, plans equally fast (faster() rounds the speed, then prefers less memory)
  // in the order of their knobs: a plan the search evaluated twice then lies beside its
  // repeat, which unique() drops, and the runners-up come out in the same order on every
  // platform. Each plan's knobs are read once, not at every comparison.
  std::vector<std::pair<std::vector<KnobValue>, Plan>> keyed;
  keyed.reserve(ev.feasible.size());
  for (Plan& p : ev.feasible) keyed.emplace_back(knob_values(p), std::move(p));
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    if (faster(a.second, b.second) || faster(b.second, a.second)) return faster(a.second, b.second);
    return a.first < b.first;
  });
  std::vector<Plan> all;
  all.reserve(keyed.size());
  for (auto& [key, p] : keyed) all.push_back(std::move(p));
  all.erase(std::unique(all.begin(), all.end(), same_choice), all.end());
  r.feasible = static_cast<int>(all.size());
  for (const Plan& p : all) {
    if (r.runners_up.size() == 5) break;
    if (!same_choice(p, best)) r.runners_up.push_back(p);
  }
  // Pareto front over (peak device memory, tokens/s): in speed order, keep each plan that
  // needs less memory than every faster one.
  std::int64_t least = INT64_MAX;
  for (const auto& p : all)
    if (p.prediction.peak_nvidia_smi_bytes < least) {
      r.pareto.push_back(p);
      least = p.prediction.peak_nvidia_smi_bytes;
    }
  return r;
}

}  // namespace

Result<SearchResult> best_plan(const Plan& base, const TechniqueSet& allowed, const Knobs& knobs) {
  // The fixed knobs are checked once, so a rule they break is reported as such: the rules
  // first (a knob the plan's stack cannot express is refused naming the stack, which adding it
  // to --techniques would not mend), then the techniques the request allows.
  {
    LONGCTX_TRY(auto valid, validate(with_knobs(base, knobs)));
    (void)valid;
  }
  LONGCTX_TRY(auto ok, check_knobs_allowed(knobs, allowed));
  (void)ok;

  Evaluator ev;
  std::optional<Plan> best;
  // Phase 1: each choice of the coarse knobs with its fastest tiles and chunk (no tiling, no
  // chunking unless fixed): an upper bound on its speed, and its best plan when it fits.
  std::vector<Candidate> candidates;
  LengthRefusals untried;  // choices only the stack's length rule refused: named if nothing fits
  for (const Plan& c : coarse_choices(base, allowed, knobs)) {
    if (!valid(c)) {
      untried.note(c);
      continue;
    }
    candidates.push_back({c, ev.run(c), ev.last_exact});
    if (candidates.back().fastest.prediction.feasible && (!best || faster(candidates.back().fastest, *best)))
      best = candidates.back().fastest;
  }
  // Phase 2: in order of that bound, search tiles and chunk until the bound cannot beat the
  // best plan found.
  CandidateOrder order(std::move(candidates));
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Candidate& cand = order.at(i, best);
    if (cand.fastest.prediction.feasible) continue;  // already its own best
    if (best && !faster(cand.fastest, *best)) break;
    search_fine(cand, allowed, knobs, ev, best);
  }
  if (!best) return no_fit(base, ev.smallest_infeasible(), untried.explain());
  return summarize(*best, ev);
}

namespace {
nlohmann::json parallel_json(const Plan& p) { return plan_to_json(p)["parallel"]; }
nlohmann::json brief(const Plan& p) {
  return {{"parallel", parallel_json(p)},
          {"micro_batch", p.train.micro_batch},
          {"peak_device_bytes", p.prediction.peak_device_bytes},
          {"peak_reserved_bytes", p.prediction.peak_reserved_bytes},
          {"peak_nvidia_smi_bytes", p.prediction.peak_nvidia_smi_bytes},
          {"peak_host_bytes", p.prediction.peak_host_bytes},
          {"step_time_s", p.prediction.step_time_s},
          {"tokens_per_s", p.prediction.tokens_per_s}};
}
}  // namespace

nlohmann::json search_summary_json(const SearchResult& r) {
  nlohmann::json j = {{"ran", true}, {"evaluated", r.evaluated}, {"feasible", r.feasible}};
  j["runners_up"] = nlohmann::json::array();
  for (const auto& p : r.runners_up) j["runners_up"].push_back(brief(p));
  j["pareto"] = nlohmann::json::array();
  for (const auto& p : r.pareto) j["pareto"].push_back(brief(p));
  return j;
}

nlohmann::json no_search_json() {
  return {{"ran", false}, {"reason", "--no-search: the knobs given were evaluated as they are, the others at their plain values"}};
}

}  // namespace longctx
