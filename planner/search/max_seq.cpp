// The longest sequence one set of techniques reaches: bounds, confirmation, refinement.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/limits.h"
#include "planner/graph/replay_script.h"
#include "planner/search/memory_model.h"
#include "planner/search/search.h"
#include "planner/search/search_order.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/stack_tiles.h"
#include "planner/search/max_seq.h"
#include "planner/search/search_space.h"

namespace longctx {
namespace {

// The most memory-saving tiles at n tokens per rank; head chunk `chunk` (-1: the smallest
// valid one). Chunking is not monotone against no chunking (the staged buffers can outweigh
// the saved set they replace), so the caller tries both 0 and the smallest chunk.
// The tiles are the search's finest candidate (knobs.cpp): tiles of at most the smallest
// length, exactly that length at the multiples of the grid the bounds are taken at.
Plan saving_plan(const Plan& c, const TechniqueSet& a, std::int64_t seq, KnobValue chunk) {
  Plan p = with_fine(c, plain_fine());
  p.train.seq = seq;
  const std::int64_t n = tokens_per_rank(p.train, c.parallel), tile = min_tile_tokens(c.model);
  const std::int64_t tiles = std::min((n + tile - 1) / tile, limits::kMaxTiles);
  for (KnobId id : {KnobId::mlp_tiles, KnobId::loss_tiles}) {
    // A stack that picks its own count (stack_tiles.h) runs that one, the knob's finest.
    if (stack_tile_count(p.model, p.train, p.parallel.ulysses, id == KnobId::loss_tiles))
      set_knob(p, id, knob_candidates(id, p, a, {}).back());
    else if (tiles > 1 && technique_allows(a, id, tiles)) set_knob(p, id, tiles);
  }
  set_knob(p, KnobId::head_chunk, chunk >= 0 ? chunk : knob_candidates(KnobId::head_chunk, p, all_techniques(), {}).back());
  return p;
}

// Largest multiple of `grid` tokens this configuration fits, from the peaks at two lengths:
// every tensor's size is affine in the sequence (tiles keep a fixed length), and the row-
// chunked kernels' scratch is constant once a rank holds a full chunk (row_chunk.h), so each
// op's live bytes are affine too, and the first op to reach the budget decides. Below a full
// chunk (models under 1024 hidden) they are concave in the length: the bound is then short of
// the true answer, never past it. Returns 0 if none fits.
OpTotals totals_of(const Plan& p) { return simulate_totals(build_step(step_inputs(p)), p.cluster.hardware.backend); }

std::int64_t most(const std::vector<std::int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

// A step graph and its totals at one length of a configuration, kept by confirm() for the
// longest length it finds to fit as allocated: down_to_reserved_fit() replays that length
// first, and builds it again otherwise (a whole graph, the largest of the search's).
struct BuiltStep {
  std::int64_t seq = 0;
  StepGraph graph;
  OpTotals totals;
};

// The op at which a step peaks as allocated, first.
int peak_op(const OpTotals& t) {
  return static_cast<int>(std::max_element(t.device_during.begin(), t.device_during.end()) - t.device_during.begin());
}

// `known`: the totals at s2 when the caller has them already (s2 >= 4 grids).
std::int64_t affine_max_seq(const Plan& base, const Plan& c, const TechniqueSet& a, KnobValue chunk, std::int64_t grid,
                            std::string& binding, std::int64_t s2 = 0, const OpTotals* known = nullptr) {
  // At least two tiles' worth at both lengths, so both have the same ops (one tile would be
  // untiled).
  std::int64_t s1 = 2 * grid;
  if (!known) s2 = 4 * grid;
  Plan p1 = saving_plan(c, a, s1, chunk);
  if (!valid(p1)) return 0;
  OpTotals r1 = totals_of(p1);
  OpTotals r2 = known ? *known : totals_of(saving_plan(c, a, s2, chunk));
  // A stack that picks its own tile count (stack_tiles.h) may tile only longer sequences
  // (ArcticTraining's TiledMLP runs one shard per `hidden` tokens of a rank, so a rank of up
  // to `hidden` tokens runs its MLP whole): then the shorter length is taken at half the
  // longer one, where it tiles too, and without a longer length given both double until
  // their ops agree (at 2 and 4 grids, Llama-3.2-1B's ranks of 2,048 tokens run one shard:
  // a configuration with no bound at all, so max-context without its ladder found no plan).
  const auto same_ops = [&] { return r1.device_during.size() == r2.device_during.size(); };
  if (!same_ops() && known && s2 >= 8 * grid) {
    s1 = s2 / 2 / grid * grid;
    p1 = saving_plan(c, a, s1, chunk);
    if (!valid(p1)) return 0;
    r1 = totals_of(p1);
  }
  while (!same_ops() && !known && s2 <= limits::kMaxSeq / 2) {
    const Plan p2 = saving_plan(c, a, 2 * s2, chunk);
    if (!valid(p2)) return 0;
    s1 = s2;
    r1 = std::move(r2);
    s2 *= 2;
    r2 = totals_of(p2);
  }
  if (!same_ops()) return 0;
  const double dev_budget = double(base.cluster.device_budget_bytes - plan_context_bytes(base));
  const double host_budget = double(base.cluster.host_budget_bytes_per_node) / double(base.cluster.shape.gpus_per_node);
  double limit = 1e30;
  binding = "";
  auto bound = [&](double v1, double v2, double budget, const char* what) {
    const double slope = (v2 - v1) / double(s2 - s1);
    const double at0 = v1 - slope * double(s1);
    if (slope <= 0) {
      if (at0 > budget) { limit = 0; binding = what; }
      return;
    }
    const double s = (budget - at0) / slope;
    if (s < limit) { limit = s; binding = what; }
  };
  for (std::size_t i = 0; i < r1.device_during.size(); ++i) {
    bound(double(r1.device_during[i]), double(r2.device_during[i]), dev_budget, device_binding(base));
    bound(double(r1.host_during[i]), double(r2.host_during[i]), host_budget, "host memory");
  }
  if (limit < double(grid)) return 0;
  // Beyond any length a plan file may hold, a bound says nothing more.
  const double cap = 1099511627776.0;  // 2^40 tokens
  return static_cast<std::int64_t>(std::min(limit, cap) / double(grid)) * grid;
}


// Coarse choices that can reach the longest sequence, the most memory-saving first, so the
// floor rises early and later choices are dropped after a single simulation. Dropped, by
// dominance the property tests check (search_detail::holds_no_more): none when zero1 is
// allowed (sharding the optimizer never raises device or host memory), and the ring's
// all-gather exchange where its NCCL buffers are no smaller than the hops': the same step as
// with hops but for every rank's k/v and every holder's dk/dv accumulators held where hops hold
// two of each (footprint/ring_attention.h), so it never reaches further; except under a stack
// whose ring runs all-gather only (torchtitan's context parallel: its profile's
// ring_exchange). Hops keep NCCL buffers per peer, so the gather is mostly kept: at two ranks
// it holds the hops' two pairs and less outside the allocator, and reaches further (Llama-3.2-3B
// on 2 H100s: 2,965,504 tokens against 2,953,216). zero1 is kept beside zero2: zero2's
// reduce-scatter buffers can outweigh the gradient shards it saves early in backward.
std::vector<Plan> max_seq_options(const Plan& base, const TechniqueSet& a) {
  const StackProfile& stack = stack_profile(base.train.stack.kind);
  Knobs k;
  k.micro_batch = 1;
  std::vector<Plan> out;
  for (const Plan& c : coarse_choices(base, a, k)) {
    const ParallelConfig& p = c.parallel;
    if (p.ring_exchange == RingExchange::AllGather && stack.ring_exchange != RingExchange::AllGather) {
      Plan hops = c;
      hops.parallel.ring_exchange = RingExchange::P2p;
      if (search_detail::holds_no_more(hops, c)) continue;
    }
    if (p.sharding == Sharding::None && has(a, Technique::Zero1)) continue;
    out.push_back(c);
  }
  auto saving_rank = [](const Plan& c) {
    const ParallelConfig& p = c.parallel;
    return std::make_tuple(p.sharding == Sharding::Zero3, p.offload_optimizer, p.offload_params, p.offload_checkpoints,
                           p.checkpoint == CheckpointPolicy::full(), p.ulysses);
  };
  // Ranks sorted beside their indices, not the plans themselves (a plan is large to move).
  std::vector<std::pair<decltype(saving_rank(base)), std::size_t>> order;
  order.reserve(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) order.emplace_back(saving_rank(out[i]), i);
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<Plan> sorted;
  sorted.reserve(out.size());
  for (const auto& [rank, i] : order) sorted.push_back(std::move(out[i]));
  return sorted;
}





BoundKey bound_key(const Plan& c, KnobValue chunk, const TechniqueSet& a) {
  BoundKey key;
  for (const Knob& k : knob_table())
    if (!k.rule.fine) key.push_back(knob_value(c, k.id));
  key.push_back(chunk);
  for (KnobId id : {KnobId::mlp_tiles, KnobId::loss_tiles}) key.push_back(technique_allows(a, id, knob(id).plain + 1));
  return key;
}

// Configurations found over the device's budget in one search (key: bound_key), each at the
// shortest length it was found so.
using DeviceOut = std::map<BoundKey, std::int64_t>;

// Whether a sibling of `probe` (m's most saving plan at `at` tokens) that offloads more was
// found over the device's budget at `at` or a shorter length: it is there too (as allocated,
// fitting is monotone in the length), and `probe` holds no less on the device
// (device_holds_no_more).
bool offloading_sibling_out(const MaxSeqCandidate& m, const TechniqueSet& a, std::int64_t at, const Plan& probe,
                            const DeviceOut& out) {
  if (out.empty()) return false;
  constexpr KnobId kOffloads[] = {KnobId::offload_optimizer, KnobId::offload_params, KnobId::offload_checkpoints};
  for (int set = 1; set < 8; ++set) {
    Plan sibling = m.coarse;
    bool more = true;
    for (int k = 0; k < 3; ++k)
      if ((set >> k) & 1) {
        more = more && knob_value(sibling, kOffloads[k]) == 0;
        set_knob(sibling, kOffloads[k], 1);
      }
    if (!more) continue;
    const auto it = out.find(bound_key(sibling, m.chunk, a));
    if (it == out.end() || it->second > at) continue;
    // The comparison first: validating a plan that fails spells out why, the dearer test.
    const Plan saving = saving_plan(sibling, a, at, m.chunk);
    if (search_detail::device_holds_no_more(saving, probe) && valid(saving)) return true;
  }
  return false;
}

// The candidate's bound. `floor`: a length known to fit with fewer techniques; a
// configuration that does not fit at (the largest multiple of its grid up to) the floor
// cannot reach past it, and is skipped after one simulation instead of two, or none where a
// sibling that offloads more was over the device's budget there (`device_out`). Returns
// nothing for a configuration that is invalid there.
std::optional<Bound> first_bound(const Plan& base, const MaxSeqCandidate& m, const TechniqueSet& a, std::int64_t floor,
                                 const DeviceOut& device_out) {
  Bound b;
  const std::int64_t at = floor / m.grid * m.grid;
  if (at < 4 * m.grid) {
    b.tokens = affine_max_seq(base, m.coarse, a, m.chunk, m.grid, b.binding);
    return b;
  }
  const Plan probe = saving_plan(m.coarse, a, at, m.chunk);
  if (!valid(probe)) {
    // The floor is beyond what this configuration may even hold (a bound of limits.h): its
    // own bound, from short lengths, is settled by confirm().
    if (!valid(saving_plan(m.coarse, a, 2 * m.grid, m.chunk))) return std::nullopt;
    b.tokens = affine_max_seq(base, m.coarse, a, m.chunk, m.grid, b.binding);
    return b;
  }
  // Remembered as out of reach at `at`: a ladder's floors only rise.
  auto out = [&](bool device_over) { return Bound{0, "", true, at, device_over}; };
  if (offloading_sibling_out(m, a, at, probe, device_out)) return out(true);
  // The model states alone are a lower bound, and so is the step up to the last layer's
  // backward: over budget there, out.
  const StandingBytes states = states_bytes(probe);
  if (!fits_as_allocated(probe, states)) return out(over_device_budget(probe, states.device));
  const StepUnlessPrefixOver built = step_unless_prefix_over(probe);
  if (!built.whole) return out(built.device_over);
  const OpTotals t = simulate_totals(*built.whole, probe.cluster.hardware.backend);
  if (!fits_as_allocated(probe, t)) return out(over_device_budget(probe, most(t.device_during)));
  b.tokens = affine_max_seq(base, m.coarse, a, m.chunk, m.grid, b.binding, at, &t);  // reuses the probe
  return b;
}

// What confirm() and down_to_reserved_fit() return, given a floor, where what they would
// return otherwise is shorter than it: no answer reads a configuration's length under the
// search's floor (max_seq says why), so the probes that would settle it are not run.
constexpr std::int64_t kUnderFloor = -1;

// Whether the caching allocator finds every block of configuration m at `seq` within the
// budget, with its finest tiles or, failing that, coarser MLP tiles. `built`: the step at
// `seq` where the caller built it, else null.
bool reserved_fits_at(const MaxSeqCandidate& m, const TechniqueSet& a, std::int64_t seq, const BuiltStep* built) {
  const Plan at = saving_plan(m.coarse, a, seq, m.chunk);
  if (!valid(at)) return false;
  std::optional<BuiltStep> own;
  if (built == nullptr || built->seq != seq) {
    own = BuiltStep{seq, build_step(step_inputs(at)), {}};
    own->totals = simulate_totals(own->graph, at.cluster.hardware.backend);
    built = &*own;
  }
  // The reserved figure is not monotone in the tiles (finer tiles leave smaller cached
  // segments a later large request cannot use): coarser MLP tiles, finest first, each
  // with the finest loss tiles, until one fits (what the search's staircase then finds).
  // The step as allocated only grows as the tiles coarsen (fits_as_allocated): once over the
  // budget so, every coarser count is too.
  //
  // Most counts fail at the request a finer one failed at: the step at another count differs
  // only in the tiled MLP's workspace (WorkspaceFamily checks it), which cached blocks serve
  // alike at each count. Each replay keeps its looks at the cache, and a count that goes as a
  // failed one did, request for request (variants_alike), fails as it did, unreplayed.
  const std::vector<KnobValue> mlps = knob_candidates(KnobId::mlp_tiles, at, a, {});
  std::optional<WorkspaceFamily> family;  // from the first coarser count on
  struct Failed {
    int member;  // in `family`, or WorkspaceFamily::kBase
    std::vector<RequestLook> looks;
  };
  std::vector<Failed> failed;
  const AllocatorSettings settings = allocator_settings(at);
  constexpr int kNoMember = WorkspaceFamily::kBase - 1;
  // Whether plan p, its step s, fits as reserved; a family member (`member`) that does not is
  // remembered with its looks.
  // (Looks say nothing where max_split_size is set: variants_alike.)
  const bool looks_tell = settings.splits_every_block();
  // The finest's replay script, shared with the counts of its family: theirs is its items at
  // their sizes (SharedScript), read where a replay before wrote it, not written again. Kept
  // where the stack retiles: elsewhere the coarser counts are other steps (an untiled MLP) or
  // none, and the finest's replay would copy its script for nothing.
  const auto retile = stack_profile(at.train.stack.kind).retile_mlp;
  std::optional<SharedScript> shared;
  if (retile != nullptr && mlps.size() > 1) shared.emplace(built->graph);
  auto replay = [&](const Plan& p, const StepGraph& graph, const OpTotals& totals, int member) {
    const int op = peak_op(totals);
    const bool look = looks_tell && member != kNoMember && (member != WorkspaceFamily::kBase || mlps.size() > 1);
    std::optional<ReplayOptions::ScriptFrom> from;
    if (shared && member == WorkspaceFamily::kBase) from = ReplayOptions::ScriptFrom{&*shared, {}};
    else if (shared && member != kNoMember)
      if (std::optional<ResizedWorkspaces> v = family->resized(WorkspaceFamily::kBase, member))
        from = ReplayOptions::ScriptFrom{&*shared, std::move(*v)};
    DeviceFit r = device_fits(p, graph, totals.device_during[static_cast<std::size_t>(op)], op, look, from ? &*from : nullptr);
    if (!r.fits && look) failed.push_back({member, std::move(r.looks)});
    return r.fits;
  };
  // Whether count `member` goes as a count replayed before it that failed (one judged so
  // without its replay adds nothing: it goes as that one).
  auto fails_as_one_before = [&](int member) {
    for (const Failed& f : failed)
      if (const std::optional<ResizedWorkspaces> v = family->resized(f.member, member))
        if (variants_alike(f.looks, std::span(&*v, 1), settings) != 0) return true;
    return false;
  };
  if (fits_as_allocated(at, built->totals) && replay(at, built->graph, built->totals, WorkspaceFamily::kBase)) return true;
  // A coarser count's step is the finest's retiled where the stack can say how the count
  // changes it (StackProfile::retile_mlp: the tiled MLP's workspaces), a copy amended count by
  // count instead of a step built for each; else built.
  std::optional<StepGraph> retiled;  // the finest's step, at the count last retiled to
  for (auto it = mlps.rbegin(); it != mlps.rend(); ++it) {
    if (*it == at.parallel.mlp_tiles) continue;
    Plan coarser = at;
    set_knob(coarser, KnobId::mlp_tiles, *it);
    if (!valid(coarser)) continue;
    const StepInputs in = step_inputs(coarser);
    if (retile != nullptr && !retiled) retiled.emplace(built->graph);
    const bool is_retiled = retile != nullptr && retile(*retiled, in);
    std::optional<StepGraph> own;
    const StepGraph& graph = is_retiled ? *retiled : own.emplace(build_step(in));
    const Backend backend = coarser.cluster.hardware.backend;
    // A retiled step is the finest's but for some workspaces: its totals and its membership
    // read those alone.
    const OpTotals totals = is_retiled ? totals_with_workspaces_of(graph, built->graph, built->totals, backend)
                                       : simulate_totals(graph, backend);
    if (!fits_as_allocated(coarser, totals)) return false;
    if (!family) family.emplace(built->graph);
    const std::optional<int> added = !(allocator_settings(coarser) == settings) ? std::nullopt
                                     : is_retiled                               ? family->add_resized(graph)
                                                                                : family->add(graph);
    const int member = added.value_or(kNoMember);
    if (member != kNoMember && fails_as_one_before(member)) continue;
    if (replay(coarser, graph, totals, member)) return true;
  }
  return false;
}

// What down_to_reserved_fit found: the length (0: none; kUnderFloor), and, of a length found,
// the longest step above it that it did not probe (0: every step above it was probed and does
// not fit).
struct ReservedWalk {
  std::int64_t tokens = 0;
  std::int64_t unprobed_top = 0;
};

// On CUDA, a length at most `seq`, in steps of `step` down from it (at most `steps`), where
// the caching allocator finds every block within the budget; 0 if none. `floor` > 0:
// kUnderFloor as soon as the answer is known to be shorter than `floor` (every step a longer
// answer could be at is found not to fit), without the probes under it.
// Fragmentation is not monotone in the length (a block freed at one length fits the next
// request; at another it is split by a small one: Llama-3.1-8B under torchtitan on 8 H100s
// fits at 245,760 tokens and not at 229,376), so the steps gallop down (1, 2, 4, ...) to a
// length that fits and bisect back up between it and the last that did not: a fitting length
// in a logarithmic number of replays, which may lie steps under the longest (`unprobed_top`
// says where the steps not probed begin; max_seq_pass walks those of the configurations
// reaching its answer one by one). `built`: the step at `seq` where the caller built it, else
// null.
ReservedWalk down_to_reserved_fit(const MaxSeqCandidate& m, const TechniqueSet& a, std::int64_t seq, std::int64_t step,
                                  std::int64_t steps, std::int64_t floor = 0, const BuiltStep* built = nullptr) {
  std::vector<std::int64_t> probed;  // the steps k probed, none of which fit but the last
  auto fits_at = [&](std::int64_t k) {
    probed.push_back(k);
    return reserved_fits_at(m, a, seq - k * step, k == 0 ? built : nullptr);
  };
  // The longest step above step `below` (exclusive) not probed.
  auto unprobed_above = [&](std::int64_t below) -> std::int64_t {
    for (std::int64_t k = 1; k < below; ++k)
      if (std::find(probed.begin(), probed.end(), k) == probed.end()) return seq - k * step;
    return 0;
  };
  // The answer is seq - good * step with good > bad at every moment: once bad reaches the
  // last step at or over the floor, the answer is under it.
  if (floor > 0 && seq < floor) return {kUnderFloor, 0};
  const std::int64_t last_over_floor = floor > 0 ? (seq - floor) / step : steps + 1;
  if (fits_at(0)) return {seq, 0};
  // seq is the last step at or over the floor: every shorter answer is under it.
  if (last_over_floor == 0) return {kUnderFloor, 0};
  std::int64_t bad = 0, good = -1;
  for (std::int64_t k = 1; k <= steps; k = std::min(2 * k, steps)) {
    if (fits_at(k)) {
      good = k;
      break;
    }
    bad = k;
    if (bad >= last_over_floor) return {kUnderFloor, 0};
    if (k == steps) break;
  }
  if (good < 0) return {0, 0};
  while (good - bad > 1) {
    const std::int64_t mid = bad + (good - bad) / 2;
    if (fits_at(mid)) good = mid;
    else bad = mid;
    if (bad >= last_over_floor) return {kUnderFloor, 0};
  }
  return {seq - good * step, unprobed_above(good)};
}

// A bound that would raise the floor is confirmed with a full simulation first (allocator
// rounding can cost a grid step). On the CPU virtual device the bound is a guess, not a
// bound: the flash kernel's per-thread block buffers grow with the length up to 768 tokens
// and then stay constant, so every configuration is settled by simulation, upwards as well.
// The length is found as allocated (monotone), then on CUDA walked down the grid to where
// the reserved figure fits too. `floor` > 0: kUnderFloor as soon as the answer is known to be
// shorter than it (the bisection's `hi` at or under it: the answer is below `hi`).
ReservedWalk confirm(const MaxSeqCandidate& m, const TechniqueSet& a, bool affine, std::int64_t floor) {
  const std::int64_t grid = m.grid;
  const bool walks_down = m.coarse.cluster.hardware.backend == Backend::Cuda;
  std::optional<BuiltStep> longest_fit;  // the step at the longest length found to fit, on CUDA
  auto fits_at = [&](std::int64_t seq) {
    const Plan at = saving_plan(m.coarse, a, seq, m.chunk);
    if (!valid(at)) return false;
    if (!walks_down) return fits_as_allocated(at, totals_of(at));
    BuiltStep step{seq, build_step(step_inputs(at)), {}};
    step.totals = simulate_totals(step.graph, at.cluster.hardware.backend);
    if (!fits_as_allocated(at, step.totals)) return false;
    longest_fit = std::move(step);  // lengths found to fit only grow
    return true;
  };
  const std::int64_t cap = (std::int64_t{1} << 40) / grid;
  // Usually the bound itself fits; else the largest fitting grid step below it, by
  // bisection (fitting is monotone in the length).
  std::int64_t lo = 0, hi = m.tokens / grid;  // lo steps fit (0: none), hi steps do not
  if (m.tokens > 0 && fits_at(m.tokens)) {
    lo = hi;
    hi = 0;
    // Gallop up from the guess to a length that does not fit: on the CPU the guess is no
    // bound, and on CUDA a bound can fall short where the row-chunked kernels' constant
    // scratch moves which moment of an op is its largest (one probe when it is exact).
    std::int64_t step = 1;
    while (lo + step <= cap && fits_at((lo + step) * grid)) {
      lo += step;
      step *= 2;
    }
    hi = std::min(lo + step, cap + 1);
  } else if (!affine && m.tokens == 0) {
    hi = 1;
    while (hi <= cap && fits_at(hi * grid)) lo = hi, hi *= 2;
  }
  auto under_floor = [&] { return floor > 0 && hi * grid <= floor; };
  // As allocated the length is under the floor: as reserved too, every step of it.
  if (under_floor()) return {kUnderFloor, 0};
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (fits_at(mid * grid)) lo = mid;
    else hi = mid;
    if (under_floor()) return {kUnderFloor, 0};
  }
  if (!walks_down || lo == 0) return {lo * grid, 0};
  return down_to_reserved_fit(m, a, lo * grid, grid, lo - 1, floor, longest_fit ? &*longest_fit : nullptr);
}

}  // namespace

Knobs coarse_knobs(const Plan& coarse) {
  Knobs k;
  for (const Knob& row : knob_table())
    if (!row.rule.fine) fix(k, row.id, knob_value(coarse, row.id));
  return k;
}

namespace {

// A configuration as a pass visits it, with its cache key.
struct Visited {
  BoundKey key;
  MaxSeqCandidate m;
};

// The most steps walk_unprobed_steps replays of one configuration: a walk's unprobed steps
// run from its longest length as allocated (which a large budget puts millions of steps up)
// down to the answer, and fragmentation's pockets lie near the answer more than near the
// allocated limit (there every byte is allocated already). 16 found the pockets 2 and 3 steps
// up of the recorded answers that moved, at 1.3 to 1.6 times max-context's time (32: 1.4 to 2;
// performance.md); Qwen3-8B on 16 GPUs has one 20 steps up.
constexpr std::int64_t kStepsWalkedAboveTheAnswer = 16;

// Each configuration of `all` that reaches the pass's `answer`, confirmed, whose galloping walk
// left steps unprobed above it: its grid's steps above the longest length found so far, up to
// its unprobed top, from the shortest, each replayed, at most kStepsWalkedAboveTheAnswer of
// them; the longest that fits is its length (in `all` and the cache), and the walks after
// start above it. Only those reaching the answer: walking every configuration's unprobed steps
// probed each step between its length as allocated and the answer (arctic's Llama-3.1-8B on 8
// H100s: 247 replays, none of which fit; 4.4 times the query's time). The answer's
// configuration then fits at no step of its grid in that window above the answer
// (MaxContext.TheAnswersConfigurationFitsAtNoLongerStepOfItsGrid). Returns whether any was
// found longer.
bool walk_unprobed_steps(const TechniqueSet& a, BoundCache& cache, std::vector<Visited>& all, std::int64_t answer) {
  std::int64_t longest = answer;
  for (Visited& v : all) {
    Bound& b = cache[v.key];
    if (v.m.tokens != answer || !b.confirmed || b.unprobed_top <= longest) continue;
    const std::int64_t grid = v.m.grid;
    std::int64_t fit = 0, seq = (longest / grid + 1) * grid;
    for (std::int64_t walked = 0; seq <= b.unprobed_top && walked < kStepsWalkedAboveTheAnswer; seq += grid, ++walked)
      if (reserved_fits_at(v.m, a, seq, nullptr)) fit = seq;
    // Unsure still: the steps past the window, if any; where there are none and nothing fit,
    // the ones under `longest` (down to the length found), for a search with a lower floor.
    if (seq > b.unprobed_top) {
      const std::int64_t below = longest / grid * grid;
      b.unprobed_top = fit == 0 && below > b.tokens ? below : 0;
    }
    if (fit == 0) continue;
    b.tokens = v.m.tokens = longest = fit;
  }
  return longest > answer;
}

// One pass over the configurations. `cut`: a configuration's confirmation stops where its
// length is found under the floor (`under_floor` is then set, and its cache entry remembers the
// floor and its unconfirmed bound); otherwise every configuration confirmed is confirmed to
// its length, those cut before too.
MaxSeq max_seq_pass(const Plan& base, const TechniqueSet& a, BoundCache& cache, std::int64_t floor, bool cut,
                    bool& under_floor) {
  MaxSeq best;
  const std::int64_t tile = min_tile_tokens(base.model);
  // Whether every op's live bytes are affine in the length, which makes two simulations a
  // configuration's answer: on CUDA, not on the CPU virtual device (see confirm()).
  const bool affine = base.cluster.hardware.backend != Backend::Cpu;
  std::vector<Visited> all;  // those with a length, in the pass's order
  DeviceOut device_out;  // this search's configurations over the device's budget
  std::string last_binding;
  const bool untied = technique_allows(a, KnobId::head_chunk, 1);
  for (const Plan& c : max_seq_options(base, a)) {
    for (KnobValue chunk : untied ? std::vector<KnobValue>{-1, 0} : std::vector<KnobValue>{0}) {
      MaxSeqCandidate m{0, sequence_multiple(c.parallel) * tile, "", c, chunk};
      const BoundKey key = bound_key(c, chunk, a);
      // An entry out of reach of a higher floor says nothing below it: computed again there.
      auto it = cache.find(key);
      if (it == cache.end() || (it->second.out_of_reach_at > 0 && floor < it->second.out_of_reach_at)) {
        const auto b = first_bound(base, m, a, floor, device_out);
        if (!b) continue;
        cache[key] = *b;
        if (b->device_over) device_out.try_emplace(key, b->out_of_reach_at);
      }
      Bound& cached = cache[key];
      m.tokens = cached.tokens;
      m.binding = cached.binding;
      if (cut && cached.under > 0 && floor >= cached.under) {  // under this floor too
        under_floor = true;
        continue;
      }
      // >=: a bound at the floor (the cap) may be the answer
      if (!cached.confirmed && (cached.under > 0 || m.tokens >= floor || !affine)) {
        const ReservedWalk walk = confirm(m, a, affine, cut ? floor : 0);
        m.tokens = walk.tokens;
        if (m.tokens == kUnderFloor) {
          cached.under = floor;
          under_floor = true;
          continue;
        }
        if (m.tokens > 0 && m.binding.empty()) m.binding = device_binding(base);
        cached = {m.tokens, m.binding, true};  // `under` cleared
        cached.unprobed_top = walk.unprobed_top;
      }
      if (!m.binding.empty()) last_binding = m.binding;
      if (m.tokens <= 0) continue;
      all.push_back({key, m});
      if (!cached.confirmed) continue;  // an unconfirmed bound at or under the floor: it cannot win
      floor = std::max(floor, m.tokens);
      if (m.tokens > best.tokens) best = {m.tokens, m.grid, m.binding, {}};
    }
  }
  // Where a configuration reaching the answer fits longer, the answer is the first in the
  // pass's order of the longest confirmed length, as the loop picks it.
  if (best.tokens > 0 && walk_unprobed_steps(a, cache, all, best.tokens)) {
    best = {};
    for (const Visited& v : all)
      if (cache[v.key].confirmed && v.m.tokens > best.tokens) best = {v.m.tokens, v.m.grid, v.m.binding, {}};
  }
  for (const Visited& v : all)
    if (v.m.tokens >= best.tokens && best.tokens > 0) best.reaching.push_back(v.m);
  if (best.tokens == 0) best.binding = last_binding.empty() ? device_binding(base) : last_binding;
  return best;
}

}  // namespace

// A configuration whose length is under the floor is never the answer nor among those that
// reach it, and raises no floor, wherever the answer reaches the floor the search began with:
// each floor a cut is made at is that one or a length some configuration reached (a cut one's
// length is under it, so under the answer, and the answer's configuration, the first to reach
// it, is the same). Where the answer falls short of the floor it began with (a rung whose
// techniques lose to its predecessor's: the rung reports its own best, however short), the
// configurations cut are confirmed to their lengths and the pass repeated, every other
// configuration's figure remembered: the same pass as without cuts.
MaxSeq max_seq(const Plan& base, const TechniqueSet& a, BoundCache& cache, std::int64_t floor) {
  bool under_floor = false;
  MaxSeq best = max_seq_pass(base, a, cache, floor, floor_cuts().allowed, under_floor);
  if (under_floor && best.tokens < floor) {
    ++floor_cuts().second_passes;
    best = max_seq_pass(base, a, cache, floor, /*cut=*/false, under_floor);
  }
  return best;
}

FloorCuts& floor_cuts() {
  thread_local FloorCuts cuts;
  return cuts;
}

// Without tiles every op's bytes depend only on the padded length and never fall as it
// grows, so the grid's answer is refined by bisection to the padding step u of each
// configuration that reaches it, and is then exact to the token as allocated (on CUDA, where
// the reserved figure does not fit there, to the step u or the grid): a longer length pads to at
// least one step more, which does not fit. With tiles it is not: between two multiples of
// the grid the finest tiles are uneven and shorter than at either, and the grid stands.
void refine_to_padding(MaxSeq& top, const TechniqueSet& a) {
  if (top.tokens == 0 || has(a, Technique::TiledMlp) || has(a, Technique::TiledLoss)) return;
  std::int64_t best = top.tokens, granularity = 1;
  std::vector<std::pair<std::int64_t, MaxSeqCandidate>> found;
  for (const MaxSeqCandidate& m : top.reaching) {
    const std::int64_t u = sequence_multiple(m.coarse.parallel);  // the padding step
    auto fits_at = [&](std::int64_t seq) {
      const Plan at = saving_plan(m.coarse, a, seq, m.chunk);
      return valid(at) && fits_as_allocated(at, totals_of(at));
    };
    std::int64_t lo = 0, hi = m.grid / u;  // top.tokens + lo*u fits; + hi*u does not (the grid's answer)
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (fits_at(top.tokens + mid * u)) lo = mid;
      else hi = mid;
    }
    // Exact as allocated; on CUDA the reserved figure may not fit there (fragmentation):
    // a few steps of u down, else the grid's answer, which does.
    std::int64_t tokens = top.tokens + lo * u;
    if (m.coarse.cluster.hardware.backend == Backend::Cuda && lo > 0) {
      // Within one grid step, in steps of u, a fitting length, not always the longest: where
      // it is not the bisection's, the answer says it is to the grid.
      const std::int64_t fit = down_to_reserved_fit(m, a, tokens, u, lo).tokens;
      if (fit != tokens) granularity = std::max(granularity, m.grid);
      tokens = std::max(fit, top.tokens);
    }
    // A stack that pads nothing (torchtitan) plans only multiples of the layout's step.
    if (!stack_profile(m.coarse.train.stack.kind).pads_sequence && u > 1) granularity = std::max(granularity, u);
    found.emplace_back(tokens, m);
    best = std::max(best, tokens);
  }
  top.reaching.clear();
  for (const auto& [tokens, m] : found)
    if (tokens == best) top.reaching.push_back(m);
  top.tokens = best;
  top.grid = granularity;
}

}  // namespace longctx
