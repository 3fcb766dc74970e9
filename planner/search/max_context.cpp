// `longctx max-context`: the ladder of techniques, the longest length and its fastest plan.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/limits.h"
#include "planner/core/units.h"
#include "planner/stacks/stack_tiles.h"
#include "planner/search/memory_model.h"
#include "planner/search/search.h"
#include "planner/search/max_seq.h"
#include "planner/search/progress.h"
#include "planner/search/search_space.h"

namespace longctx {
namespace {

// The ladder's rungs, in the order a practitioner adds techniques.
const std::vector<std::vector<Technique>>& ladder_rungs() {
  static const std::vector<std::vector<Technique>> rungs = {
      {Technique::Zero3},
      {Technique::Ulysses},
      {Technique::Checkpoint},
      {Technique::OffloadCheckpoints},
      {Technique::TiledMlp, Technique::TiledLoss},
      {Technique::Untied},
      {Technique::Ring},
      {Technique::Zero1, Technique::Zero2, Technique::OffloadOptimizer, Technique::OffloadParams},
  };
  return rungs;
}

// The rungs that add a technique `allowed` holds: the ladder's length.
int rungs_climbed(const TechniqueSet& allowed) {
  int n = 0;
  for (const auto& rung : ladder_rungs())
    n += std::any_of(rung.begin(), rung.end(), [&](Technique t) { return has(allowed, t); }) ? 1 : 0;
  return n;
}

// The longest length the model itself accepts (check_model_for_seq: its sliding window, or its
// max_position_embeddings under --max-positions model) in [from, to), where it accepts `from`
// (or from is 0) and refuses `to`: the lengths it accepts are those up to its limit.
std::int64_t longest_model_accepts(const Plan& base, std::int64_t from, std::int64_t to) {
  std::int64_t lo = from, hi = to;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (check_model_for_seq(base.model, mid, base.train.max_positions)) lo = mid;
    else hi = mid;
  }
  return lo;
}

// The shortest length max-context tries: one smallest tile per rank.
std::int64_t shortest_length(const Plan& base) { return min_tile_tokens(base.model) * base.cluster.shape.world(); }

// The fastest plan at the model's own limit, where the limit falls between a search's answer
// `m` (fits; none: 0) and the next length it would try (refused by the model) and a plan fits
// there. The search's lengths are multiples of its grid (the smallest tile per rank), which a
// model's limit need not be: a sliding window of 5,000 tokens was answered 4,096 (the limit
// named as binding), though plans fit at 5,000.
std::optional<Plan> plan_at_model_limit(const Plan& base, const TechniqueSet& allowed, const MaxSeq& m) {
  const std::int64_t tokens = m.tokens, next = tokens > 0 ? tokens + m.grid : shortest_length(base);
  if (check_model_for_seq(base.model, next, base.train.max_positions)) return std::nullopt;
  const std::int64_t limit = longest_model_accepts(base, tokens, next);
  if (limit <= tokens) return std::nullopt;
  Plan at = base;
  at.train.seq = limit;
  auto found = best_plan(at, allowed);
  if (!found) return std::nullopt;
  return found->best;
}

// Each rung's answer is a floor for the next and for the final answer; `ringless` the longest
// a rung without ring attention reached, a floor for the longest without one.
std::vector<LadderRung> ladder(const Plan& base, const TechniqueSet& allowed, BoundCache& cache, std::int64_t& floor,
                               std::int64_t& ringless) {
  std::vector<LadderRung> out;
  TechniqueSet so_far;
  for (const auto& rung : ladder_rungs()) {
    bool added = false;
    for (Technique t : rung)
      if (has(allowed, t)) {
        so_far.set(static_cast<std::size_t>(t));
        added = true;
      }
    if (!added) continue;
    const MaxSeq m = max_seq(base, so_far, cache, floor);
    // The grid's answer, said as such: refining every rung to the padding step, as the
    // headline is, cost max-context a third more time (the last rung takes the headline's own
    // answer: max_context).
    out.push_back({technique_names(so_far), m.tokens, m.binding, m.grid});
    if (const auto at_limit = plan_at_model_limit(base, so_far, m)) {
      out.back().max_tokens = at_limit->train.seq;
      out.back().granularity = 1;
    }
    floor = std::max(floor, m.tokens);
    if (!has(so_far, Technique::Ring)) ringless = std::max(ringless, m.tokens);
    search_progress().finish_stage();
  }
  return out;
}

// The fastest any plan of the coarse choices `fixed` leaves can be, rounded as faster() rounds:
// their plain fine knobs (no tiles, no chunk) make each choice's fastest plan (search.h's
// bound); 0 where none is valid.
double speed_bound(const Plan& at, const TechniqueSet& allowed, const Knobs& fixed) {
  double bound = 0;
  for (const Plan& c : coarse_choices(at, allowed, fixed))
    if (valid(c)) bound = std::max(bound, rounded_speed(predict_verdict(c).prediction.tokens_per_s));
  return bound;
}

// The coarse knobs' values, in the table's order: what a search at one length depends on.
std::vector<KnobValue> coarse_values(const Plan& p) {
  std::vector<KnobValue> v;
  for (const Knob& k : knob_table())
    if (!k.rule.fine) v.push_back(knob_value(p, k.id));
  return v;
}

// The fastest plan at the longest length: only coarse choices whose bound reaches it can fit
// (any other tiles or chunk only raise their peak). Each choice is searched once (a choice
// reaching with and without a head chunk is one search: the chunk is searched in it), the
// fastest bound first, and not at all where its bound is slower than the fastest plan found
// (a plan slower to three digits loses whatever its memory). The answer is the first of the
// fastest in the order `top` lists the choices, as a search in that order finds it: a choice's
// search does not depend on the others, and one whose bound only ties the fastest is searched.
std::optional<Plan> fastest_at(const Plan& base, const TechniqueSet& allowed, const MaxSeq& top) {
  struct Choice {
    Knobs fixed;
    double bound;
    std::size_t order;  // in top.reaching's order
  };
  Plan at = base;
  at.train.seq = top.tokens;
  std::vector<Choice> choices;
  std::vector<std::vector<KnobValue>> seen;
  for (const auto& m : top.reaching) {
    std::vector<KnobValue> values = coarse_values(m.coarse);
    if (std::find(seen.begin(), seen.end(), values) != seen.end()) continue;
    seen.push_back(std::move(values));
    const Knobs fixed = coarse_knobs(m.coarse);
    choices.push_back({fixed, speed_bound(at, allowed, fixed), choices.size()});
  }
  std::stable_sort(choices.begin(), choices.end(), [](const Choice& a, const Choice& b) { return a.bound > b.bound; });
  std::optional<Plan> fastest;
  std::size_t fastest_order = 0;
  for (const Choice& c : choices) {
    if (fastest && c.bound < rounded_speed(fastest->prediction.tokens_per_s)) continue;
    auto found = best_plan(at, allowed, c.fixed);
    if (!found) continue;
    const Plan& p = found->best;
    const bool tie = fastest && !faster(p, *fastest) && !faster(*fastest, p);
    if (!fastest || faster(p, *fastest) || (tie && c.order < fastest_order)) {
      fastest = p;
      fastest_order = c.order;
    }
  }
  return fastest;
}

// A rule that keeps the plan from spreading the tokens over larger Ulysses degrees (a ring
// spreads them without one: the probe runs none).
std::string ulysses_rule(const Plan& plan, const Plan& base, const TechniqueSet& allowed) {
  if (!has(allowed, Technique::Ulysses)) return "";
  for (std::int64_t u = plan.parallel.ulysses + 1; u <= base.cluster.shape.world(); ++u) {
    if (base.cluster.shape.world() % u != 0) continue;
    Plan p = with_fine(plan, plain_fine());
    p.parallel.ulysses = static_cast<int>(u);
    p.parallel.ring = 1;
    p.parallel.ring_exchange = RingExchange::P2p;  // the ring's exchange goes with the ring
    p.train.seq = u * min_tile_tokens(base.model);
    conform_to_stack(p.model, p.cluster.shape, p.train, p.parallel);
    auto v = validate(p);
    if (!v) return fmt::format("ulysses {}: {}", u, v.error().message);
  }
  return "";
}

// The largest Ulysses degree the heads' rules allow on this cluster (the search's own
// candidates, knobs.h), or 1.
std::int64_t largest_ulysses(const Plan& base) {
  Plan p = with_fine(base, plain_fine());
  p.parallel = ParallelConfig{};
  p.train.seq = min_tile_tokens(base.model);
  const auto degrees = knob_candidates(KnobId::ulysses, p, all_techniques(), {});
  return degrees.empty() ? 1 : *std::max_element(degrees.begin(), degrees.end());
}

// Which sequence layout the plan runs, and where ring attention may be chosen, why: the
// answer held against the longest length without a ring, which `ringless` tokens are known
// to reach (a floor for its search).
std::string layout_reason(const Plan& plan, const Plan& base, const TechniqueSet& allowed, std::int64_t tokens,
                          BoundCache& cache, std::int64_t ringless) {
  const int u = plan.parallel.ulysses, r = plan.parallel.ring;
  const std::int64_t world = base.cluster.shape.world();
  // With a ring, how its k/v travel: the search weighs the gathered exchange's r pairs of
  // memory against its single collective each way.
  const std::string exchange = plan.parallel.ring_exchange == RingExchange::AllGather
                                   ? " (k/v all-gathered)"
                                   : " (k/v passed hop by hop)";
  const std::string shape = r > 1 && u > 1 ? fmt::format("hybrid ulysses {} x ring {}{}", u, r, exchange)
                            : r > 1        ? fmt::format("ring {}{}", r, exchange)
                            : u > 1        ? fmt::format("ulysses {}", u)
                                           : std::string("no sequence parallelism");
  if (!has(allowed, Technique::Ring) || world == 1) return shape;
  TechniqueSet without = allowed;
  without.reset(static_cast<std::size_t>(Technique::Ring));
  MaxSeq alone = max_seq(base, without, cache, ringless);
  // As the answer, to the model's own limit where that binds between two lengths searched.
  if (const auto at_limit = plan_at_model_limit(base, without, alone)) alone.tokens = at_limit->train.seq;
  const std::int64_t umax = has(allowed, Technique::Ulysses) ? largest_ulysses(base) : 1;
  // A ring the length does not need: chosen for its speed, whatever Ulysses may span.
  if (r > 1 && alone.tokens >= tokens)
    return fmt::format("{}: {} tokens, as far as the longest without a ring ({}); the ring's layout is the faster "
                       "there",
                       shape, format_count(tokens), format_count(alone.tokens));
  if (r > 1 && umax < world)
    return fmt::format("{}: {} tokens, where the longest without a ring is {} (Ulysses stops at degree {} of the {} "
                       "GPUs: {})",
                       shape, format_count(tokens), format_count(alone.tokens), umax, world,
                       has(allowed, Technique::Ulysses) ? "the heads' rules" : "Ulysses is not among the techniques allowed "
                                                                              "(or the stack has none)");
  if (r > 1)
    return fmt::format("{}: {} tokens, where the longest without a ring is {} (Ulysses may span all {} GPUs, but the "
                       "ring's layout holds less at this length)",
                       shape, format_count(tokens), format_count(alone.tokens), world);
  // The answer has no ring: it is itself the longest without one, refined to the token where
  // the ringless search's answer is to its grid (the hf stack's 8 GPUs: 40,216, not 39,936).
  return fmt::format("{}: a ring reaches no further ({} tokens without one; Ulysses up to degree {})", shape,
                     format_count(std::max(alone.tokens, tokens)), umax);
}

}  // namespace

Result<MaxContextResult> max_context(const Plan& base, const TechniqueSet& allowed, bool with_ladder) {
  // Bounds first (limits.h): the model and the cluster are checked before any search, which
  // loops over the GPUs' divisors and builds graphs as large as the model.
  {
    Plan one = base;
    one.train.seq = 1;
    one.train.micro_batch = 1;
    one.parallel = ParallelConfig{};
    conform_to_stack(one.model, one.cluster.shape, one.train, one.parallel);
    LONGCTX_TRY(auto ok, validate(one));
    (void)ok;
  }
  if (base.cluster.device_budget_bytes < 1 || base.cluster.device_budget_bytes > limits::kMaxBytes)
    return Error::bad_input("--budget", fmt::format("{} bytes is outside 1 B .. 4PiB per GPU", base.cluster.device_budget_bytes));
  if (base.cluster.host_budget_bytes_per_node < 1 || base.cluster.host_budget_bytes_per_node > limits::kMaxBytes)
    return Error::bad_input("--host-mem", fmt::format("{} bytes is outside 1 B .. 4PiB per node", base.cluster.host_budget_bytes_per_node));
  MaxContextResult r;
  BoundCache cache;
  std::int64_t floor = 0, ringless = 0;
  // The stages a progress line counts: the rungs, the answer, its fastest plan, its layout.
  search_progress().expect((with_ladder ? rungs_climbed(allowed) : 0) + 3);
  if (with_ladder) r.ladder = ladder(base, allowed, cache, floor, ringless);
  MaxSeq top = max_seq(base, allowed, cache, floor);
  search_progress().finish_stage();
  refine_to_padding(top, allowed);
  r.max_tokens = top.tokens;
  r.granularity = top.grid;
  r.binding = top.binding;
  // At the bound on lengths (limits.h) the next granule is refused, not out of memory.
  if (top.tokens > 0 && top.tokens + top.grid > limits::kMaxSeq) r.binding = "longctx's bound of 2^40 tokens";
  std::optional<Plan> fastest;
  if (top.tokens == 0) {
    // A model whose own limit is under the shortest length tried answers at its limit, where
    // a plan fits there.
    if (auto at_limit = plan_at_model_limit(base, allowed, top)) {
      r.max_tokens = at_limit->train.seq;
      r.granularity = 1;
      fastest = std::move(at_limit);
    } else {
      Plan p = base;
      p.train.seq = shortest_length(base);
      if (!check_model_for_seq(base.model, p.train.seq, base.train.max_positions))
        p.train.seq = std::max<std::int64_t>(1, longest_model_accepts(base, 0, p.train.seq));
      auto b = best_plan(p, allowed);
      if (!b) {
        // It names the smallest peak and what dominates it; max-context has no --seq to shorten.
        Error e = b.error();
        if (const auto at = e.message.find(kNoFitAdvice); at != std::string::npos)
          e.message.replace(at, std::strlen(kNoFitAdvice),
                            fmt::format("even at {} tokens, the shortest max-context tries: allow more techniques or "
                                        "more GPUs, or give a larger --budget",
                                        p.train.seq));
        return e;
      }
      return Error{ErrorKind::NoFit, "--budget", fmt::format("no plan fits even at {} tokens ({} binds)", p.train.seq, top.binding)};
    }
  } else if (auto at_limit = plan_at_model_limit(base, allowed, top)) {  // top as refined: r's figures
    r.max_tokens = at_limit->train.seq;
    r.granularity = 1;
    fastest = std::move(at_limit);
  } else {
    fastest = fastest_at(base, allowed, top);
  }
  if (!fastest) return Error{ErrorKind::Internal, "max-context", "the longest plan did not re-evaluate as feasible"};
  // The last rung allows what the headline does: its answer is the headline's, refined.
  if (!r.ladder.empty() && r.ladder.back().techniques == technique_names(allowed)) {
    LadderRung& last = r.ladder.back();
    last.max_tokens = r.max_tokens;
    last.granularity = r.granularity;
    last.binding = r.binding;
  }
  search_progress().finish_stage();
  r.plan = *fastest;
  r.rule = ulysses_rule(r.plan, base, allowed);
  r.layout = layout_reason(r.plan, base, allowed, r.max_tokens, cache, ringless);
  search_progress().finish_stage();
  return r;
}

nlohmann::json max_context_json(const MaxContextResult& r) {
  nlohmann::json j = {{"max_tokens", r.max_tokens},
                      {"granularity_tokens", r.granularity},
                      {"binding", r.binding},
                      {"rule", r.rule},
                      {"layout", r.layout},
                      {"plan", plan_to_json(r.plan)}};
  if (!r.positions.empty()) j["positions"] = r.positions;
  j["ladder"] = nlohmann::json::array();
  for (const auto& rung : r.ladder)
    j["ladder"].push_back({{"techniques", rung.techniques},
                           {"max_tokens", rung.max_tokens},
                           {"granularity_tokens", rung.granularity},
                           {"binding", rung.binding}});
  return j;
}

}  // namespace longctx
