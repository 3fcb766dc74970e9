#include "planner/search/search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/graph/work_counts.h"
#include "planner/search/length_refusals.h"
#include "planner/search/memory_model.h"
#include "planner/core/units.h"
#include "planner/search/search_order.h"
#include "planner/search/search_space.h"

namespace longctx {

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

using search_detail::Candidate;
using search_detail::CandidateOrder;
using search_detail::Evaluator;
using search_detail::knob_values;

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
  if (pr.binding == "host memory") {
    // Figures that round alike (2.00 TiB against 2.00 TiB) are shown to the byte.
    std::string needs = format_bytes(pr.peak_host_bytes), budget = format_bytes(base.cluster.host_budget_bytes_per_node);
    if (needs == budget) {
      needs += fmt::format(" ({} bytes)", pr.peak_host_bytes);
      budget += fmt::format(" ({} bytes)", base.cluster.host_budget_bytes_per_node);
    }
    return Error{ErrorKind::NoFit, "--host-mem",
                 fmt::format("no plan fits: the smallest device peak found fits, but needs {} of host memory per node, "
                             "budget {}{}", needs, budget, also)};
  }
  // A plan that fits as allocated but not as the caching allocator holds it: its replay could
  // not place a request, so its reserved figure stops at the budget and is no peak to name.
  if (e.plan.cluster.hardware.backend == Backend::Cuda && !over_device_budget(e.plan, pr.peak_device_bytes))
    return Error{ErrorKind::NoFit, "--budget",
                 fmt::format("no plan fits: the least memory found allocates {} at its peak (op {}; {} dominates: {}), "
                             "but the caching allocator cannot place every block of it within the budget of {} (its "
                             "cached segments are split too finely for a later request); {}{}",
                             format_bytes(pr.peak_device_bytes), pr.peak_at, dominant, format_bytes(most),
                             format_bytes(base.cluster.device_budget_bytes), kNoFitAdvice, also)};
  return Error{ErrorKind::NoFit, "--budget",
               fmt::format("no plan fits: the smallest peak is {} ({} allocated at op {}; {} dominates: {}), budget {}; "
                           "{}{}",
                           format_bytes(pr.peak_nvidia_smi_bytes), format_bytes(pr.peak_device_bytes), pr.peak_at,
                           dominant, format_bytes(most), format_bytes(base.cluster.device_budget_bytes), kNoFitAdvice, also)};
}

}  // namespace

namespace {

// The fine rows' candidates for one coarse choice (fine_options) are nested in table order, by
// search.h's bounds: the first (the head chunk) outermost, each of its values tried, as chunking
// is monotone only among chunked plans; then a staircase over the other two (MLP and loss
// tiles), the last bisected.
static_assert(kFineKnobs == 3, "search_fine nests three fine rows: a head chunk, then two tile counts");

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
      if (ev.fits_as_allocated_when_run(with_fine(c, {chunk, mlp, losses[static_cast<std::size_t>(mid)]}))) hi = mid;
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

// Searches the fine knobs of one coarse choice, updating `best`. `heads`: where given, each
// chunk's fastest plan that was held against `best` is added to it.
void search_fine(const Candidate& cand, const TechniqueSet& allowed, const Knobs& fixed, Evaluator& ev,
                 std::optional<Plan>& best, std::vector<Plan>* heads = nullptr) {
  const Plan& c = cand.coarse;
  const FineOptions o = fine_options(cand.fastest, allowed, fixed);
  const auto& [chunks, mlps, losses] = o;
  // Bound 1: the most memory-saving fine knobs must fit as allocated: the most tiles, with the
  // smallest chunk or with none (chunking is monotone only among chunked plans).
  // The dominance holds at the finest tiles the search picks, not at counts a request fixes.
  const bool free_fine =
      std::none_of(fine_knobs().begin(), fine_knobs().end(), [&](KnobId id) { return fixed_value(fixed, id).has_value(); });
  const int bound_plans = chunks.back() != chunks.front() ? 2 : 1;
  if (free_fine && ev.known_not_to_fit(c)) {  // so the two plans below do not
    ev.count_judged(bound_plans);
    return;
  }
  const Plan chunked = with_fine(c, {chunks.back(), mlps.back(), losses.back()});
  const Plan unchunked = with_fine(c, {chunks.front(), mlps.back(), losses.back()});
  // Their model states alone over the budget: neither fits, which running them would find.
  if (ev.judge_by_dominance && !fits_as_allocated(chunked, states_bytes(chunked)) &&
      (bound_plans == 1 || !fits_as_allocated(unchunked, states_bytes(unchunked)))) {
    ev.count_judged(bound_plans);
    ev.note_does_not_fit(c);
    return;
  }
  bool any_fits = fits_as_allocated(ev.run(chunked));
  if (!any_fits && bound_plans == 2) any_fits = fits_as_allocated(ev.run(unchunked));
  if (!any_fits) {
    ev.note_does_not_fit(c);
    return;
  }
  // Speed only falls as the chunk shrinks or tiles grow, so a plan that cannot beat the
  // best one ends its row (more loss tiles) or its whole chunk (more MLP tiles too).
  for (KnobValue chunk : chunks) {
    // The chunk's fastest plan (fewest tiles) cannot win: smaller chunks are slower still.
    const Plan head = ev.run(with_fine(c, {chunk, mlps.front(), losses.front()}));
    if (heads) heads->push_back(head);
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

bool same_choice(const Plan& a, const Plan& b) { return a.parallel == b.parallel && a.train.micro_batch == b.train.micro_batch; }

// Whether a chunk's fastest plan ends its chunk's search against `best` (search_fine).
bool pruned_by(const std::optional<Plan>& best, const Plan& head) { return best && !faster(head, *best); }

// What a group searched out of order leaves, for order_is_moot.
struct GroupPass {
  std::optional<Plan> before;          // the best plan before the group
  std::vector<Plan> heads;             // search_fine's chunk heads, held against the best
  std::vector<std::size_t> found_from; // per candidate: where its feasible plans start in ev.feasible
};

// Whether searching a group's candidates in any order gives what faster()'s order gives: the
// same evaluations and the same best plan. The search reaches every candidate of a group
// slower than the best plan (none fits; a candidate that fits was the best already), so
// each is searched whatever its place, while the best stays slower than the group (else
// the rest would be cut at its peak). A candidate's evaluations depend on the order only
// through the best its chunk heads are held against (search_fine), and the best only
// improves, so a head judged alike by the best before and after the group is judged alike
// at every place. The best plan found is the first of the fastest (faster() is strict): the
// same in every order unless plans of two candidates tie for it. With no plan found at all
// the smallest peak named (no_fit) is the first evaluated on ties: the order is needed.
bool order_is_moot(const GroupPass& g, const std::optional<Plan>& best, const Evaluator& ev, double group_speed) {
  if (!best) return true;  // as yet: best_plan searches again in order if none is ever found
  if (rounded_speed(best->prediction.tokens_per_s) >= group_speed) return false;
  for (const Plan& h : g.heads)
    if (pruned_by(g.before, h) != pruned_by(best, h)) return false;
  if (g.before && !faster(*best, *g.before)) return true;  // unchanged: the earlier best wins ties
  int tying = 0;  // candidates with a plan as good as the best
  for (std::size_t k = 0; k < g.found_from.size(); ++k) {
    const std::size_t end = k + 1 < g.found_from.size() ? g.found_from[k + 1] : ev.feasible.size();
    for (std::size_t f = g.found_from[k]; f < end; ++f)
      if (!faster(*best, ev.feasible[f]) && !faster(ev.feasible[f], *best)) {
        ++tying;
        break;
      }
  }
  return tying == 1;
}

// Searches the group of equally fast candidates [first, end) least bound first, where that
// gives what faster()'s order gives (order_is_moot): their peaks, which stop short for a plan
// that does not fit (each settled by a whole replay), are then never settled. Otherwise
// forgets what it ran and returns false, for the search to go through the group in order
// (the evaluations it ran are remembered: Evaluator). Tried while the best plan found is
// slower than the group, or none is: in order, every candidate of such a group is reached, and
// the least peak of those left is settled at each place (a whole replay each, where a plan's
// peak stops short: ArcticTraining's 70B on 64 GPUs at 4M spent two thirds of its time there);
// a group searched in vain (a plan as fast as the group found) costs its evaluations without a
// replay saved. Where the best is as fast as the group, the order decides where it stops.
bool search_group_in_any_order(const CandidateOrder& order, std::size_t first, std::size_t end,
                               const TechniqueSet& allowed, const Knobs& knobs, Evaluator& ev, std::optional<Plan>& best) {
  const double group_speed = order.speed_at(first);
  if (best && rounded_speed(best->prediction.tokens_per_s) >= group_speed) return false;
  const Evaluator::Mark mark = ev.mark();
  GroupPass g{best, {}, {}};
  // Least peak first, as faster() would have them were the peaks exact: where a candidate
  // finds a plan as fast as the group, the order is needed, and the sooner that shows the less
  // is searched in vain.
  std::vector<std::size_t> by_bound(end - first);
  std::iota(by_bound.begin(), by_bound.end(), first);
  std::stable_sort(by_bound.begin(), by_bound.end(), [&](std::size_t a, std::size_t b) {
    return order.unordered(a).fastest.prediction.peak_nvidia_smi_bytes < order.unordered(b).fastest.prediction.peak_nvidia_smi_bytes;
  });
  for (const std::size_t k : by_bound) {
    g.found_from.push_back(ev.feasible.size());
    search_fine(order.unordered(k), allowed, knobs, ev, best, &g.heads);
    if (best && rounded_speed(best->prediction.tokens_per_s) >= group_speed) break;  // the order is needed
  }
  if (order_is_moot(g, best, ev, group_speed)) {
    ++work_counts().groups_unordered;
    if (g.before) ++work_counts().groups_unordered_past_a_plan;
    return true;
  }
  ev.rollback(mark);
  best = g.before;
  return false;
}

// Phase 2 of best_plan: each candidate's fine knobs, in faster()'s order, until its bound
// cannot beat the best plan found. `any_order`: a group whose order cannot change the result
// is searched as it lies (search_group_in_any_order).
void search_candidates(CandidateOrder& order, const TechniqueSet& allowed, const Knobs& knobs, Evaluator& ev,
                       std::optional<Plan>& best, bool any_order) {
  std::size_t group_end = 0;  // of the group reached last
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (any_order && i >= group_end) {  // a group's first place
      group_end = order.group_end(i);
      if (search_group_in_any_order(order, i, group_end, allowed, knobs, ev, best)) {
        i = group_end - 1;
        continue;
      }
    }
    const Candidate& cand = order.at(i, best);
    if (cand.fastest.prediction.feasible) continue;  // already its own best
    if (best && !faster(cand.fastest, *best)) break;
    search_fine(cand, allowed, knobs, ev, best);
  }
}

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
  LONGCTX_TRY(auto fixed_ok, check_fixed_knobs(base, allowed, knobs));
  (void)fixed_ok;
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
  // best plan found. Where no plan fits, the smallest peak named is the first evaluated on
  // ties (no_fit), which the order of every group decides: the groups are searched again,
  // each in order.
  const Evaluator::Mark after_fastest = ev.mark();
  CandidateOrder order(std::move(candidates));
  ev.judge_by_dominance = search_detail::dominance_allowed();
  search_candidates(order, allowed, knobs, ev, best, search_detail::any_order_allowed());
  ev.judge_by_dominance = false;  // the smallest peak named needs every figure (no_fit)
  if (!best) {
    ev.rollback(after_fastest);
    search_candidates(order, allowed, knobs, ev, best, /*any_order=*/false);
  }
  if (!best) return no_fit(base, ev.smallest_infeasible(), untried.explain());
  return summarize(*best, ev);
}

Result<bool> check_fixed_knobs(const Plan& base, const TechniqueSet& allowed, const Knobs& knobs) {
  auto as_given = validate(with_knobs(base, knobs));
  if (as_given) return true;
  const std::vector<Plan> choices = coarse_choices(base, allowed, knobs);
  if (std::any_of(choices.begin(), choices.end(), [](const Plan& c) { return valid(c); })) return true;
  return as_given.error();
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
