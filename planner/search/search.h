#pragma once
// The search over the knob table's knobs (knobs.h): the fastest plan that fits at a sequence
// length, and the longest sequence any allowed plan fits.
//
// Pruning uses only bounds proven by the memory model's monotonicity (tested as properties
// in tests/unit/properties_test.cpp): more MLP or loss tiles never raise the peak, among
// chunked plans a smaller head chunk never raises it, and the cost model never makes them
// faster. So
//  - a choice of the other knobs whose most tiles fit neither with the smallest chunk nor
//    unchunked is infeasible whatever the tiles and chunk, and so is every choice that holds
//    no more than it (search_order.h, holds_no_more: more samples, a gathered ring, less
//    sharding), whose most tiles are then not run;
//  - a choice whose fastest tiles and chunk are no faster than the best plan so far cannot win.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/core/knobs.h"
#include "planner/core/plan.h"
#include "common/result.h"

namespace longctx {

struct SearchResult {
  Plan best;                      // the fastest feasible plan (prediction filled)
  std::vector<Plan> runners_up;   // the next fastest feasible plans, fastest first
  std::vector<Plan> pareto;       // feasible plans no other beats on both peak memory and speed
  int evaluated = 0;
  int feasible = 0;
};

// REQUIRES: base holds the model, the cluster and train.seq. A fixed knob that breaks a rule,
// or that needs a technique outside `allowed`, is BadInput. When no plan fits, NoFit names
// the smallest peak found, where it happens and what dominates it, then kNoFitAdvice.
inline constexpr const char* kNoFitAdvice = "allow more techniques, more GPUs, or a shorter --seq";
Result<SearchResult> best_plan(const Plan& base, const TechniqueSet& allowed, const Knobs& knobs = {});

// The fixed knobs against the rules, as best_plan checks them before it searches: validate()
// of the base with them. Its refusal is the answer unless some choice the search would make
// is valid: then the rule broken is one of a searched knob's plain value (a sequence too long
// for one rank, where the search picks a ring or Ulysses degree that shares it), not of the
// knobs given.
Result<bool> check_fixed_knobs(const Plan& base, const TechniqueSet& allowed, const Knobs& knobs);

struct LadderRung {
  std::vector<std::string> techniques;  // allowed on this rung (cumulative)
  std::int64_t max_tokens = 0;          // 0: nothing fits
  std::string binding;                  // what stops it growing: "device memory", "host memory", or a rule
  // As MaxContextResult's: max_tokens + granularity does not fit; 1 exact to the token.
  std::int64_t granularity = 0;
};

struct MaxContextResult {
  std::int64_t max_tokens = 0;
  // Every length up to max_tokens fits (padded); max_tokens + granularity does not. 1 (exact
  // to the token) without tiles; with them u x the smallest tile, max_tokens a multiple of it.
  std::int64_t granularity = 0;
  std::string binding;
  // A rule that keeps the plan from spreading the sequence further (a larger Ulysses degree
  // the heads forbid), empty if none.
  std::string rule;
  // The sequence layout the plan runs (Ulysses, ring, hybrid) and, where ring attention was
  // allowed, why: the longest length without a ring beside the answer.
  std::string layout;
  // When max_tokens runs past the model's max_position_embeddings (under --max-positions
  // extend): what those positions need (max_positions_note); empty if within it.
  std::string positions;
  Plan plan;                     // the fastest feasible plan at max_tokens
  std::vector<LadderRung> ladder;
};

// The ladder adds techniques in the order a practitioner does: zero3, +ulysses, +checkpoint,
// +offload-checkpoints, +tiled-mlp/tiled-loss, +untied, +ring (each rung restricted to `allowed`).
Result<MaxContextResult> max_context(const Plan& base, const TechniqueSet& allowed, bool with_ladder = true);

// Every valid configuration the search considers at base.train.seq, unevaluated: the brute
// force the tests hold the search against.
std::vector<Plan> search_space(const Plan& base, const TechniqueSet& allowed, const Knobs& knobs = {});

// Tokens per second to three significant digits: the speed plans are ranked by.
double rounded_speed(double tokens_per_s);
// Better: more tokens per second (to three significant digits); at equal speed, less device
// memory. The search walks tile counts up from the fewest and stops at the first that fits
// (more tiles are never faster: a launch each, which the rounding may hide), so a runner-up of
// more tiles, as fast to three digits, may need less memory than the best.
bool faster(const Plan& a, const Plan& b);

// The search's block of `plan --json`: "ran": true, its counts, runners-up and Pareto front.
nlohmann::json search_summary_json(const SearchResult& r);
// The same block when no search ran (`plan --no-search`): "ran": false and why, no counts.
nlohmann::json no_search_json();
nlohmann::json max_context_json(const MaxContextResult& r);

}  // namespace longctx
