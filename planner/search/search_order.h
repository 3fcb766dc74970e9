#pragma once
// The search's bookkeeping (internal to search.cpp and its tests): the evaluations it ran,
// and the coarse candidates in the order faster() ranks them.
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "planner/core/knobs.h"
#include "planner/search/memory_model.h"

#include "planner/core/plan.h"

namespace longctx::search_detail {

// Every knob's value, in the table's order: what tells the search's plans apart (they share
// the model, cluster and length), and one order on plans that faster() finds equal.
std::vector<KnobValue> knob_values(const Plan& p);

// Runs and counts evaluations (predict_verdict: a plan that does not fit may have a reserved
// figure that stops short); keeps the feasible plans and, while none fits, what no_fit needs
// to name the plan of the smallest peak.
class Evaluator {
 public:
  int evaluated = 0;
  std::vector<Plan> feasible;
  bool last_exact = true;  // whether the last plan run has predict()'s figures

  Plan run(Plan p);
  // What fits_as_allocated says of run(p)'s figures. While `judge_by_dominance` is on, a plan
  // not run before whose step prefix is over the budget already (step_unless_prefix_over) is
  // counted as run and not run: its figures would only ever be read for the smallest peak,
  // which a search judging by dominance does not name.
  bool fits_as_allocated_when_run(const Plan& p);

  // The search's first bound, the most memory-saving fine knobs of a coarse choice, judged by
  // dominance instead of by a run: where a choice's most saving plans do not fit as allocated,
  // those of a choice that holds no more than it (holds_no_more) do not either. Only where the
  // request fixes no fine knob (search.cpp).
  // note_does_not_fit records a choice whose plans were run and did not fit (or whose model
  // states alone were over the budget: search.cpp, search_fine); known_not_to_fit
  // says whether one that holds no more was, while `judge_by_dominance` is on; count_judged
  // counts plans so judged as evaluated, as run() would. They are not tracked for
  // smallest_infeasible(): a search that may need that (one that finds no plan) runs with it off.
  bool judge_by_dominance = false;
  void note_does_not_fit(const Plan& coarse);
  bool known_not_to_fit(const Plan& coarse) const;
  void count_judged(int plans) { evaluated += plans; }
  // The first plan evaluated of the smallest nvidia-smi peak, among those that do not fit (none
  // if a plan fits). REQUIRES: no plan fits.
  std::optional<Plan> smallest_infeasible() const;

  // The state at a moment, to return to (rollback): evaluations run after it are forgotten as
  // though never run. Evaluations are pure, so running them again gives the same figures.
  struct Mark;
  Mark mark() const;
  void rollback(const Mark& m);

 private:
  // A plan kept for the no-fit message. Shared, never changed once kept: mark() copies every
  // one kept, and the search marks before each group of candidates.
  struct Indexed {
    std::shared_ptr<const Plan> plan;
    int index = 0;  // the evaluation's
  };
  void track_infeasible(const Plan& p, bool exact);
  Verdict verdict(const Plan& p);
  // p's verdict where a plan of its knobs (`key`: knob_values(p)) and choice was evaluated, or null.
  const Verdict* remembered(const Plan& p, const std::vector<KnobValue>& key) const;

  // Each plan's verdict by its knobs, with the plan's choice to check a hit against: a plan
  // evaluated again (a group searched again in order, a chunk's fastest plan that is its
  // candidate's) costs no second evaluation, though it counts as one.
  struct Remembered {
    ParallelConfig parallel;
    std::int64_t micro_batch = 0;
    Verdict verdict;
  };
  std::map<std::vector<KnobValue>, Remembered> verdicts_;
  // The choices whose most saving plans did not fit as allocated, by what holds_no_more leaves
  // alike (sibling_key).
  std::map<std::vector<KnobValue>, std::vector<Plan>> not_fitting_;

  std::optional<Indexed> smallest_;
  std::vector<Indexed> bounded_;
};

struct Evaluator::Mark {
  int evaluated = 0;
  std::size_t feasible = 0;
  bool last_exact = true;
  std::optional<Indexed> smallest;
  std::vector<Indexed> bounded;
};

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
  explicit CandidateOrder(std::vector<Candidate> candidates);
  // The i-th candidate in faster()'s order. REQUIRES: i < size(), the candidates before it
  // asked for first (or their whole group passed over), and `best` (the fastest plan found
  // that fits) the search's.
  const Candidate& at(std::size_t i, const std::optional<Plan>& best);
  std::size_t size() const { return candidates_.size(); }

  // The end of the group of equally fast candidates that starts at i, and its candidates in
  // no settled order (each one once): for a search that passes over the group as a whole.
  std::size_t group_end(std::size_t i) const;
  const Candidate& unordered(std::size_t k) const { return candidates_[k]; }
  // The rounded speed (rounded_speed) of the candidates of i's group.
  double speed_at(std::size_t i) const { return speed(candidates_[i]); }

 private:
  static double speed(const Candidate& c);
  std::int64_t peak(std::size_t k) const { return candidates_[k].fastest.prediction.peak_nvidia_smi_bytes; }
  bool stops_at(std::size_t i, const std::optional<Plan>& best) const;
  void bring_least_forward(std::size_t i);

  std::vector<Candidate> candidates_;
  std::size_t group_end_ = 0;  // the end of the group of equally fast candidates reached last
};

// Whether coarse choice `a`'s most memory-saving plans (search_fine's first bound: the finest
// tiles, with the smallest head chunk or none) hold no more than `b`'s at any op, on the device
// (as allocated, and outside the allocator: plan_context_bytes) and the host: the same choice
// (true), or the same but that `a`
//   - runs no more samples (micro-batch), on CUDA where the stack picks no tile count of its
//     own (ArcticTraining's follow the tokens: Qwen3-8B on 8 H100s at 16K tokens, Ulysses 4,
//     holds 0.2 GB less at two samples than at one; on the CPU virtual device the flash
//     kernel's blocks follow the length: tiny-gqa's ring of 4 at 256 tokens, 10 KB less);
//   - passes k/v round its ring where `b` gathers them (longctx's ring holds every rank's pair
//     where hops hold two: footprint/ring_attention.h), where its NCCL buffers are no larger
//     (hops keep buffers per peer: a ring of 8 holds 1.59 GB outside the allocator against the
//     gather's 1.19 GB);
//   - shards its optimizer where `b` shards nothing (zero1 against none). Not zero2 against
//     zero1: its reduce-scatters' buffers can outweigh the gradient shards it saves (Qwen3-8B
//     on 4 H100s at 64K tokens without checkpointing: 0.9 GB more).
// The dominance the search judges with (Evaluator); properties_test.cpp holds each pair it
// names to the figures (ASiblingThatHoldsNoMoreNeverHoldsMore).
bool holds_no_more(const Plan& a, const Plan& b);

// Whether plan `a` holds no more than `b` at any op on the device, as allocated and outside
// the allocator (plan_context_bytes), the host aside: the same plan but that `a` offloads the
// optimizer's states, the parameter shards or the checkpointed layer inputs wherever `b` does,
// and more. Each offload moves tensors the step keeps on the device to the host, and what it
// brings back (a layer's shards, a checkpoint) stands where the device kept them before.
// max-context judges by it a choice whose more offloaded sibling did not fit the device
// (max_seq.cpp, first_bound); properties_test.cpp holds it to the figures on every stack
// (AnOffloadingSiblingNeverHoldsMoreOnTheDevice).
bool device_holds_no_more(const Plan& a, const Plan& b);

// Whether best_plan may search a group of equally fast candidates as it lies where its order
// cannot change the result (search.cpp, order_is_moot); on by default. This thread's switch:
// tests turn it off to hold the search to faster()'s order throughout.
bool& any_order_allowed();
// Whether best_plan may judge a choice's most saving plans by dominance
// (Evaluator::judge_by_dominance); on by default. This thread's switch, for tests to hold the
// answers to those of a search that runs every plan.
bool& dominance_allowed();
// Whether Evaluator::smallest_infeasible settles its bounded plans least bound first, stopping
// where no bound left can win; on by default. Off, it settles every one (a whole evaluation
// each). This thread's switch, for tests to hold the no-fit answer to the plain one.
bool& least_bound_first();

}  // namespace longctx::search_detail
