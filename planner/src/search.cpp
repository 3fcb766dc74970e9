#include "longctx/planner/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "longctx/planner/memory_model.h"
#include "longctx/planner/units.h"

namespace longctx {

const char* to_string(Technique t) {
  switch (t) {
    case Technique::Zero1: return "zero1";
    case Technique::Zero2: return "zero2";
    case Technique::Zero3: return "zero3";
    case Technique::OffloadOptimizer: return "offload-optimizer";
    case Technique::OffloadParams: return "offload-params";
    case Technique::Ulysses: return "ulysses";
    case Technique::Untied: return "untied";
    case Technique::Checkpoint: return "checkpoint";
    case Technique::OffloadCheckpoints: return "offload-checkpoints";
    case Technique::TiledMlp: return "tiled-mlp";
    case Technique::TiledLoss: return "tiled-loss";
  }
  return "?";
}

std::vector<std::string> technique_names(const TechniqueSet& s) {
  std::vector<std::string> out;
  for (int i = 0; i < kTechniques; ++i)
    if (s.test(static_cast<std::size_t>(i))) out.emplace_back(to_string(static_cast<Technique>(i)));
  return out;
}

TechniqueSet all_techniques() { return TechniqueSet().set(); }

Result<TechniqueSet> parse_techniques(const std::string& text) {
  if (text == "all") return all_techniques();
  TechniqueSet s;
  if (text == "none" || text.empty()) return s;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    bool found = false;
    for (int i = 0; i < kTechniques; ++i)
      if (item == to_string(static_cast<Technique>(i))) {
        s.set(static_cast<std::size_t>(i));
        found = true;
      }
    if (!found)
      return Error::bad_input("--techniques", fmt::format("'{}' is not a technique; known: {}", item,
                                                          fmt::join(technique_names(all_techniques()), ", ")));
  }
  return s;
}

namespace {

bool has(const TechniqueSet& s, Technique t) { return s.test(static_cast<std::size_t>(t)); }

// The smallest tile the search considers: thinner matmuls run too far below peak to pay.
std::int64_t min_tile_tokens(const ModelConfig& m) {
  std::int64_t t = 1;
  while (t * 2 <= std::min<std::int64_t>(1024, m.hidden)) t *= 2;
  return t;
}

// Tile counts the search tries for n tokens per rank: 1, powers of two, and the count that
// makes tiles of the smallest length (what max-context uses).
std::vector<int> tile_options(std::int64_t n, std::int64_t min_tile, bool allowed) {
  std::vector<int> out = {1};
  if (!allowed) return out;
  for (std::int64_t t = 2; t <= n && n / t >= min_tile && t <= (1 << 20); t *= 2)
    if (n % t == 0) out.push_back(static_cast<int>(t));
  if (n % min_tile == 0 && n / min_tile > out.back() && n / min_tile <= (1 << 20))
    out.push_back(static_cast<int>(n / min_tile));
  return out;
}

// Head chunks: 0 (off) and every valid chunk, largest (fastest) first.
std::vector<int> chunk_options(const ModelConfig& m, const Plan& base, int u, bool allowed) {
  std::vector<int> out = {0};
  if (!allowed) return out;
  const std::int64_t local = m.heads / u;
  for (std::int64_t c = local; c >= 1; --c) {
    ParallelConfig p;
    p.ulysses = u;
    p.head_chunk = static_cast<int>(c);
    if (validate(m, base.cluster.shape, base.train, p).ok()) out.push_back(static_cast<int>(c));
  }
  return out;
}

std::vector<int> ulysses_options(const Plan& base, bool allowed) {
  std::vector<int> out;
  const std::int64_t world = base.cluster.shape.world();
  for (std::int64_t u = 1; u <= world; ++u) {
    if (world % u != 0) continue;
    if (u > 1 && !allowed) break;
    ParallelConfig p;
    p.ulysses = static_cast<int>(u);
    TrainConfig t = base.train;
    if (t.seq < 1) t.seq = u;  // only the head rules matter here
    if (validate(base.model, base.cluster.shape, t, p).ok()) out.push_back(static_cast<int>(u));
  }
  return out;
}

// The knobs that are neither tiles nor head chunk: each combination is searched over the
// fine knobs with the monotonic bounds of search.h.
struct Coarse {
  Sharding sharding;
  int ulysses;
  CheckpointPolicy checkpoint;
  bool offload_checkpoints, offload_optimizer, offload_params;
  std::int64_t micro_batch;
};

Result<bool> check_knobs_allowed(const Knobs& k, const TechniqueSet& a) {
  auto need = [&](bool used, Technique t, const char* knob) -> Result<bool> {
    if (used && !has(a, t))
      return Error::bad_input(knob, fmt::format("needs '{}' in --techniques", to_string(t)));
    return true;
  };
  if (k.sharding && *k.sharding != Sharding::None) {
    const Technique t = *k.sharding == Sharding::Zero1 ? Technique::Zero1
                        : *k.sharding == Sharding::Zero2 ? Technique::Zero2 : Technique::Zero3;
    LONGCTX_TRY(auto ok, need(true, t, "--sharding"));
    (void)ok;
  }
  LONGCTX_TRY(auto a1, need(k.ulysses && *k.ulysses > 1, Technique::Ulysses, "--ulysses"));
  LONGCTX_TRY(auto a2, need(k.head_chunk && *k.head_chunk > 0, Technique::Untied, "--head-chunk"));
  LONGCTX_TRY(auto a3, need(k.checkpoint && k.checkpoint->any(), Technique::Checkpoint, "--checkpoint"));
  LONGCTX_TRY(auto a4, need(k.offload_checkpoints.value_or(false), Technique::OffloadCheckpoints, "--offload-checkpoints"));
  LONGCTX_TRY(auto a5, need(k.offload_optimizer.value_or(false), Technique::OffloadOptimizer, "--offload-optimizer"));
  LONGCTX_TRY(auto a6, need(k.offload_params.value_or(false), Technique::OffloadParams, "--offload-params"));
  LONGCTX_TRY(auto a7, need(k.mlp_tiles && *k.mlp_tiles > 1, Technique::TiledMlp, "--mlp-tiles"));
  LONGCTX_TRY(auto a8, need(k.loss_tiles && *k.loss_tiles > 1, Technique::TiledLoss, "--loss-tiles"));
  (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7, (void)a8;
  return true;
}

std::vector<Coarse> coarse_options(const Plan& base, const TechniqueSet& a, const Knobs& k) {
  std::vector<Sharding> shardings;
  if (k.sharding) shardings = {*k.sharding};
  else {
    shardings = {Sharding::None};
    if (has(a, Technique::Zero1)) shardings.push_back(Sharding::Zero1);
    if (has(a, Technique::Zero2)) shardings.push_back(Sharding::Zero2);
    if (has(a, Technique::Zero3)) shardings.push_back(Sharding::Zero3);
  }
  std::vector<int> us = k.ulysses ? std::vector<int>{*k.ulysses} : ulysses_options(base, has(a, Technique::Ulysses));
  std::vector<CheckpointPolicy> ckpts;
  if (k.checkpoint) ckpts = {*k.checkpoint};
  else if (has(a, Technique::Checkpoint)) ckpts = {CheckpointPolicy::none(), CheckpointPolicy::every_k(2), CheckpointPolicy::full()};
  else ckpts = {CheckpointPolicy::none()};
  auto bools = [](std::optional<bool> fixed, bool allowed) {
    if (fixed) return std::vector<bool>{*fixed};
    return allowed ? std::vector<bool>{false, true} : std::vector<bool>{false};
  };
  std::vector<std::int64_t> mbs = k.micro_batch ? std::vector<std::int64_t>{*k.micro_batch} : std::vector<std::int64_t>{1, 2, 4};
  std::vector<Coarse> out;
  for (auto s : shardings)
    for (int u : us)
      for (const auto& c : ckpts)
        for (bool oc : bools(k.offload_checkpoints, has(a, Technique::OffloadCheckpoints) && c.any()))
          for (bool oo : bools(k.offload_optimizer, has(a, Technique::OffloadOptimizer)))
            for (bool op : bools(k.offload_params, has(a, Technique::OffloadParams) && s == Sharding::Zero3))
              for (auto mb : mbs) out.push_back({s, u, c, oc, oo, op, mb});
  return out;
}

Plan with(const Plan& base, const Coarse& c, int chunk, int mlp, int loss) {
  Plan p = base;
  p.train.micro_batch = c.micro_batch;
  p.parallel.sharding = c.sharding;
  p.parallel.ulysses = c.ulysses;
  p.parallel.checkpoint = c.checkpoint;
  p.parallel.offload_checkpoints = c.offload_checkpoints;
  p.parallel.offload_optimizer = c.offload_optimizer;
  p.parallel.offload_params = c.offload_params;
  p.parallel.head_chunk = chunk;
  p.parallel.mlp_tiles = mlp;
  p.parallel.loss_tiles = loss;
  return p;
}


// Runs and counts evaluations; keeps the feasible plans and the smallest infeasible peak.
struct Evaluator {
  int evaluated = 0;
  std::vector<Plan> feasible;
  std::optional<Plan> smallest_infeasible;

  Plan run(Plan p) {
    ++evaluated;
    p.prediction = predict(p);
    if (p.prediction.feasible) feasible.push_back(p);
    else if (!smallest_infeasible || p.prediction.peak_device_bytes < smallest_infeasible->prediction.peak_device_bytes)
      smallest_infeasible = p;
    return p;
  }
};

}  // namespace

namespace {
// Speed to three significant digits: differences below that are inside the cost model's
// error, and should not buy a plan that needs more memory. Rounding is monotone, so the
// search's bounds still hold.
double rounded_speed(double tokens_per_s) {
  if (tokens_per_s <= 0) return 0;
  const double scale = std::pow(10.0, std::floor(std::log10(tokens_per_s)) - 2);
  return std::round(tokens_per_s / scale) * scale;
}
}  // namespace

bool faster(const Plan& a, const Plan& b) {
  const double sa = rounded_speed(a.prediction.tokens_per_s), sb = rounded_speed(b.prediction.tokens_per_s);
  if (sa != sb) return sa > sb;
  return a.prediction.peak_device_bytes < b.prediction.peak_device_bytes;
}

std::vector<Plan> search_space(const Plan& base, const TechniqueSet& allowed, const Knobs& knobs) {
  std::vector<Plan> out;
  const std::int64_t min_tile = min_tile_tokens(base.model);
  for (const Coarse& c : coarse_options(base, allowed, knobs)) {
    Plan shape = with(base, c, 0, 1, 1);
    if (!validate(shape.model, shape.cluster.shape, shape.train, shape.parallel).ok()) continue;
    const std::int64_t n = c.micro_batch * base.train.seq / c.ulysses;
    const auto chunks = knobs.head_chunk ? std::vector<int>{*knobs.head_chunk}
                                         : chunk_options(base.model, shape, c.ulysses, has(allowed, Technique::Untied));
    const auto mlps = knobs.mlp_tiles ? std::vector<int>{*knobs.mlp_tiles} : tile_options(n, min_tile, has(allowed, Technique::TiledMlp));
    const auto losses = knobs.loss_tiles ? std::vector<int>{*knobs.loss_tiles} : tile_options(n, min_tile, has(allowed, Technique::TiledLoss));
    for (int chunk : chunks)
      for (int mlp : mlps)
        for (int loss : losses) {
          Plan p = with(base, c, chunk, mlp, loss);
          if (validate(p.model, p.cluster.shape, p.train, p.parallel).ok()) out.push_back(p);
        }
  }
  return out;
}

namespace {

Error no_fit(const Plan& base, const std::optional<Plan>& smallest) {
  if (!smallest)
    return Error{ErrorKind::NoFit, "--seq", fmt::format("no valid configuration for {} tokens on {} GPUs", base.train.seq,
                                                        base.cluster.shape.world())};
  const Evaluation e = evaluate(smallest->prediction.feasible ? base : *smallest);
  std::string dominant;
  std::int64_t most = -1;
  for (const auto& [k, v] : e.plan.prediction.breakdown)
    if (v > most) { most = v; dominant = k; }
  const auto& pr = e.plan.prediction;
  if (pr.binding == "host memory")
    return Error{ErrorKind::NoFit, "--host-mem",
                 fmt::format("no plan fits: the smallest device peak found fits, but needs {} of host memory per node, "
                             "budget {}", format_bytes(pr.peak_host_bytes), format_bytes(base.cluster.host_budget_bytes_per_node))};
  return Error{ErrorKind::NoFit, "--budget",
               fmt::format("no plan fits: the smallest peak is {} at op {} ({} dominates: {}), budget {}; allow more "
                           "techniques, more GPUs, or a shorter --seq",
                           format_bytes(pr.peak_device_bytes), pr.peak_at, dominant, format_bytes(most),
                           format_bytes(base.cluster.device_budget_bytes))};
}

}  // namespace

Plan with_knobs(Plan base, const Knobs& k) {
  base.parallel.sharding = k.sharding.value_or(k.offload_params.value_or(false) ? Sharding::Zero3 : Sharding::None);
  base.parallel.ulysses = k.ulysses.value_or(1);
  base.parallel.head_chunk = k.head_chunk.value_or(0);
  base.parallel.checkpoint =
      k.checkpoint.value_or(k.offload_checkpoints.value_or(false) ? CheckpointPolicy::full() : CheckpointPolicy::none());
  base.parallel.offload_checkpoints = k.offload_checkpoints.value_or(false);
  base.parallel.offload_optimizer = k.offload_optimizer.value_or(false);
  base.parallel.offload_params = k.offload_params.value_or(false);
  base.parallel.mlp_tiles = k.mlp_tiles.value_or(1);
  base.parallel.loss_tiles = k.loss_tiles.value_or(1);
  base.train.micro_batch = k.micro_batch.value_or(1);
  return base;
}

Result<SearchResult> best_plan(const Plan& base, const TechniqueSet& allowed, const Knobs& knobs) {
  LONGCTX_TRY(auto ok, check_knobs_allowed(knobs, allowed));
  (void)ok;
  // The fixed knobs are checked once, so a rule they break is reported as such.
  {
    const Plan probe = with_knobs(base, knobs);
    LONGCTX_TRY(auto valid, validate(probe.model, probe.cluster.shape, probe.train, probe.parallel));
    (void)valid;
  }

  Evaluator ev;
  std::optional<Plan> best;
  const std::int64_t min_tile = min_tile_tokens(base.model);
  // Phase 1: each choice of the coarse knobs with its fastest tiles and chunk (no tiling, no
  // chunking): an upper bound on its speed, and its best plan when it fits.
  struct Candidate {
    Coarse coarse;
    Plan fastest;
  };
  std::vector<Candidate> candidates;
  for (const Coarse& c : coarse_options(base, allowed, knobs)) {
    Plan shape = with(base, c, knobs.head_chunk.value_or(0), knobs.mlp_tiles.value_or(1), knobs.loss_tiles.value_or(1));
    if (!validate(shape.model, shape.cluster.shape, shape.train, shape.parallel).ok()) continue;
    candidates.push_back({c, ev.run(shape)});
    if (candidates.back().fastest.prediction.feasible && (!best || faster(candidates.back().fastest, *best)))
      best = candidates.back().fastest;
  }
  // Phase 2: in order of that bound, search tiles and chunk until the bound cannot beat the
  // best plan found.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return faster(a.fastest, b.fastest); });
  for (const Candidate& cand : candidates) {
    if (cand.fastest.prediction.feasible) continue;  // already its own best
    if (best && !faster(cand.fastest, *best)) break;
    const Coarse& c = cand.coarse;
    const std::int64_t n = c.micro_batch * base.train.seq / c.ulysses;
    const auto chunks = knobs.head_chunk ? std::vector<int>{*knobs.head_chunk}
                                         : chunk_options(base.model, cand.fastest, c.ulysses, has(allowed, Technique::Untied));
    const auto mlps = knobs.mlp_tiles ? std::vector<int>{*knobs.mlp_tiles} : tile_options(n, min_tile, has(allowed, Technique::TiledMlp));
    const auto losses = knobs.loss_tiles ? std::vector<int>{*knobs.loss_tiles} : tile_options(n, min_tile, has(allowed, Technique::TiledLoss));

    // Bound 1: the most memory-saving fine knobs must fit: the most tiles, with the smallest
    // chunk or with none (chunking is monotone only among chunked plans).
    bool any_fits = ev.run(with(base, c, chunks.back(), mlps.back(), losses.back())).prediction.feasible;
    if (!any_fits && chunks.back() != chunks.front())
      any_fits = ev.run(with(base, c, chunks.front(), mlps.back(), losses.back())).prediction.feasible;
    if (!any_fits) continue;
    // Staircase over (mlp tiles, loss tiles) per chunk: the fewest loss tiles that fit can
    // only fall as MLP tiles rise, and more tiles are never faster.
    // Speed only falls as the chunk shrinks or tiles grow, so a plan that cannot beat the
    // best one ends its row (more loss tiles) or its whole chunk (more MLP tiles too).
    for (int chunk : chunks) {
      // The chunk's fastest plan (fewest tiles) cannot win: smaller chunks are slower still.
      const Plan head = ev.run(with(base, c, chunk, mlps.front(), losses.front()));
      if (best && !faster(head, *best)) {
        if (chunk != 0) break;
        continue;
      }
      if (head.prediction.feasible) {
        best = head;
        continue;
      }
      // Staircase: for each MLP tile count, the fewest loss tiles that fit (binary search:
      // fitting is monotone in tiles); that count can only fall as MLP tiles rise.
      int hi = static_cast<int>(losses.size()) - 1;
      for (int mlp : mlps) {
        if (!ev.run(with(base, c, chunk, mlp, losses[static_cast<std::size_t>(hi)])).prediction.feasible) continue;
        int lo = 0;  // losses[lo - 1] does not fit (or lo == 0); losses[hi] fits
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (ev.run(with(base, c, chunk, mlp, losses[static_cast<std::size_t>(mid)])).prediction.feasible) hi = mid;
          else lo = mid + 1;
        }
        Plan p = with(base, c, chunk, mlp, losses[static_cast<std::size_t>(hi)]);
        p.prediction = predict(p);
        if (!best || faster(p, *best)) best = p;
        if (hi == 0) break;  // more MLP tiles only slow it down
      }
    }
  }
  if (!best) return no_fit(base, ev.smallest_infeasible);

  SearchResult r;
  r.best = *best;
  r.evaluated = ev.evaluated;
  auto& all = ev.feasible;
  std::sort(all.begin(), all.end(), faster);
  all.erase(std::unique(all.begin(), all.end(), [](const Plan& a, const Plan& b) { return a.parallel == b.parallel && a.train.micro_batch == b.train.micro_batch; }),
            all.end());
  r.feasible = static_cast<int>(all.size());
  for (std::size_t i = 1; i < all.size() && r.runners_up.size() < 5; ++i) r.runners_up.push_back(all[i]);
  // Pareto front over (peak device memory, tokens/s): in speed order, keep each plan that
  // needs less memory than every faster one.
  std::int64_t least = INT64_MAX;
  for (const auto& p : all)
    if (p.prediction.peak_device_bytes < least) {
      r.pareto.push_back(p);
      least = p.prediction.peak_device_bytes;
    }
  return r;
}

namespace {

// The most memory-saving tiles at n tokens per rank; head chunk `chunk` (-1: the smallest
// valid one). Chunking is not monotone against no chunking (the staged buffers can outweigh
// the saved set they replace), so the caller tries both 0 and the smallest chunk.
Plan saving_plan(const Plan& base, const Coarse& c, const TechniqueSet& a, std::int64_t seq, int chunk) {
  Plan p = with(base, c, 0, 1, 1);
  p.train.seq = seq;
  const std::int64_t n = seq / c.ulysses;
  const std::int64_t tile = min_tile_tokens(base.model);
  if (has(a, Technique::TiledMlp) && n / tile > 1) p.parallel.mlp_tiles = static_cast<int>(n / tile);
  if (has(a, Technique::TiledLoss) && n / tile > 1) p.parallel.loss_tiles = static_cast<int>(n / tile);
  p.parallel.head_chunk = chunk >= 0 ? chunk : chunk_options(base.model, p, c.ulysses, true).back();
  return p;
}

// Largest multiple of `grid` tokens this configuration fits, from the peaks at two lengths:
// every tensor's size is affine in the sequence (tiles keep a fixed length), so each op's
// live bytes are too, and the first op to reach the budget decides. Returns 0 if none fits.
OpTotals totals_of(const Plan& p) {
  const StepInputs in{p.model, p.cluster.shape, p.cluster.hardware.backend, p.train, p.parallel, false,
                      p.cluster.hardware.threads};
  return simulate_totals(build_step(in), in.backend);
}

// Whether the totals fit the plan's budgets.
bool fits(const Plan& p, const OpTotals& t) {
  const std::int64_t dev = *std::max_element(t.device_during.begin(), t.device_during.end());
  const std::int64_t host = *std::max_element(t.host_during.begin(), t.host_during.end());
  return dev + p.cluster.hardware.context_bytes <= p.cluster.device_budget_bytes &&
         host * p.cluster.shape.gpus_per_node <= p.cluster.host_budget_bytes_per_node;
}

// `known`: the totals at s2 when the caller has them already (s2 >= 4 grids).
std::int64_t affine_max_seq(const Plan& base, const Coarse& c, const TechniqueSet& a, int chunk, std::int64_t grid,
                            std::string& binding, std::int64_t s2 = 0, const OpTotals* known = nullptr) {
  // At least two tiles' worth at both lengths, so both have the same ops (one tile would be
  // untiled).
  const std::int64_t s1 = 2 * grid;
  if (!known) s2 = 4 * grid;
  const Plan p1 = saving_plan(base, c, a, s1, chunk);
  if (!validate(p1.model, p1.cluster.shape, p1.train, p1.parallel).ok()) return 0;
  const OpTotals r1 = totals_of(p1);
  const OpTotals r2 = known ? *known : totals_of(saving_plan(base, c, a, s2, chunk));
  if (r1.device_during.size() != r2.device_during.size()) return 0;
  const double dev_budget = double(base.cluster.device_budget_bytes - base.cluster.hardware.context_bytes);
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
    bound(double(r1.device_during[i]), double(r2.device_during[i]), dev_budget, "device memory");
    bound(double(r1.host_during[i]), double(r2.host_during[i]), host_budget, "host memory");
  }
  if (limit < double(grid)) return 0;
  // Beyond any length a plan file may hold, a bound says nothing more.
  const double cap = 1099511627776.0;  // 2^40 tokens
  return static_cast<std::int64_t>(std::min(limit, cap) / double(grid)) * grid;
}


// Coarse choices that can reach the longest sequence. Dropped, by dominance the property
// tests check: none when zero1 is allowed, and none or zero1 when zero2 is and the optimizer
// stays on the device (sharding more never raises device memory; host memory only grows
// when offloaded gradients arrive during backward, as zero2's do).
std::vector<Coarse> max_seq_options(const Plan& base, const TechniqueSet& a) {
  Knobs k;
  k.micro_batch = 1;
  std::vector<Coarse> out;
  for (const Coarse& c : coarse_options(base, a, k)) {
    if (c.sharding == Sharding::Zero1 && has(a, Technique::Zero2) && !c.offload_optimizer) continue;
    if (c.sharding == Sharding::None && has(a, Technique::Zero1)) continue;
    if (c.sharding == Sharding::None && has(a, Technique::Zero2) && !c.offload_optimizer) continue;
    out.push_back(c);
  }
  return out;
}

struct MaxSeqCandidate {
  std::int64_t tokens = 0;   // from the affine bound, before confirmation
  std::int64_t grid = 0;
  std::string binding;
  Coarse coarse;
  int chunk = 0;
};

struct MaxSeq {
  std::int64_t tokens = 0;
  std::int64_t grid = 0;
  std::string binding;
  std::vector<MaxSeqCandidate> reaching;  // every candidate whose bound reaches `tokens`
};

// Affine bounds already computed, keyed by everything they depend on: the ladder's rungs
// share most of their configurations.
using BoundKey = std::tuple<int, int, int, int, bool, bool, bool, int, bool, bool>;
// Value: the longest sequence (a bound, or confirmed by a full simulation), what binds, confirmed.
using BoundCache = std::map<BoundKey, std::tuple<std::int64_t, std::string, bool>>;

// `floor`: a length known to fit with fewer techniques. A configuration that does not fit at
// (the largest multiple of its grid up to) the floor cannot reach past it, and is skipped
// after one simulation instead of two.
MaxSeq max_seq(const Plan& base, const TechniqueSet& a, BoundCache& cache, std::int64_t floor = 0) {
  MaxSeq best;
  const std::int64_t tile = min_tile_tokens(base.model);
  // Whether every op's live bytes are affine in the length, which makes two simulations a
  // configuration's answer: on CUDA, not on the CPU virtual device (see below).
  const bool affine = base.cluster.hardware.backend != Backend::Cpu;
  std::vector<MaxSeqCandidate> all;
  std::string last_binding;
  // The most memory-saving choices first, so the floor rises early and later choices are
  // dropped after a single simulation.
  std::vector<Coarse> options = max_seq_options(base, a);
  auto saving_rank = [](const Coarse& c) {
    return std::make_tuple(c.sharding == Sharding::Zero3, c.offload_optimizer, c.offload_params, c.offload_checkpoints,
                           c.checkpoint == CheckpointPolicy::full(), c.ulysses);
  };
  std::stable_sort(options.begin(), options.end(), [&](const Coarse& x, const Coarse& y) { return saving_rank(x) > saving_rank(y); });
  for (const Coarse& c : options) {
    const std::int64_t grid = c.ulysses * tile;
    for (int chunk : has(a, Technique::Untied) ? std::vector<int>{-1, 0} : std::vector<int>{0}) {
      MaxSeqCandidate m{0, grid, "", c, chunk};
      const BoundKey key{static_cast<int>(c.sharding), c.ulysses, static_cast<int>(c.checkpoint.kind), c.checkpoint.every,
                         c.offload_checkpoints, c.offload_optimizer, c.offload_params, chunk,
                         has(a, Technique::TiledMlp), has(a, Technique::TiledLoss)};
      if (auto it = cache.find(key); it != cache.end()) {
        m.tokens = std::get<0>(it->second);
        m.binding = std::get<1>(it->second);
      } else {
        const std::int64_t at = floor / grid * grid;
        if (at >= 4 * grid) {
          // Not fitting at the floor, it cannot reach past it.
          const Plan probe = saving_plan(base, c, a, at, chunk);
          if (!validate(probe.model, probe.cluster.shape, probe.train, probe.parallel).ok()) continue;
          // The step up to the last layer's backward is a lower bound: over budget there, out.
          const StepInputs head_in{probe.model, probe.cluster.shape, probe.cluster.hardware.backend, probe.train, probe.parallel,
                                   /*prefix_only=*/true, probe.cluster.hardware.threads};
          if (!fits(probe, simulate_totals(build_step(head_in), head_in.backend))) {
            cache[key] = {0, "", true};
            continue;
          }
          const OpTotals t = totals_of(probe);
          if (!fits(probe, t)) {
            // Floors only rise (rungs in order, then the answer): remember it as out of reach.
            cache[key] = {0, "", true};
            continue;
          }
          m.tokens = affine_max_seq(base, c, a, chunk, grid, m.binding, at, &t);  // reuses the probe
        } else {
          m.tokens = affine_max_seq(base, c, a, chunk, grid, m.binding);
        }
        cache[key] = {m.tokens, m.binding, false};
      }
      // A bound that would raise the floor is confirmed with a full simulation first
      // (allocator rounding can cost a grid step). On the CPU virtual device the bound is a
      // guess, not a bound: the flash kernel's per-thread block buffers grow with the length
      // up to 768 tokens and then stay constant, so every configuration is settled by
      // simulation, upwards as well.
      auto& cached = cache[key];
      if (!std::get<2>(cached) && (m.tokens > floor || !affine)) {
        auto fits_at = [&](std::int64_t seq) {
          const Plan at = saving_plan(base, c, a, seq, chunk);
          return validate(at.model, at.cluster.shape, at.train, at.parallel).ok() && fits(at, totals_of(at));
        };
        // Usually the bound itself fits; else the largest fitting grid step below it, by
        // bisection (fitting is monotone in the length).
        std::int64_t lo = 0, hi = m.tokens / grid;  // lo steps fit (0: none), hi steps do not
        if (m.tokens > 0 && fits_at(m.tokens)) {
          lo = hi;
          hi = 0;
          if (!affine) {
            // Gallop up from the guess to a length that does not fit.
            const std::int64_t cap = (std::int64_t{1} << 40) / grid;
            std::int64_t step = 1;
            while (lo + step <= cap && fits_at((lo + step) * grid)) {
              lo += step;
              step *= 2;
            }
            hi = std::min(lo + step, cap + 1);
          }
        } else if (!affine && m.tokens == 0) {
          hi = 1;
          while (hi <= (std::int64_t{1} << 40) / grid && fits_at(hi * grid)) lo = hi, hi *= 2;
        }
        while (hi - lo > 1) {
          const std::int64_t mid = lo + (hi - lo) / 2;
          if (fits_at(mid * grid)) lo = mid;
          else hi = mid;
        }
        m.tokens = lo * grid;
        if (m.tokens > 0 && m.binding.empty()) m.binding = "device memory";
        cached = {m.tokens, m.binding, true};
      }
      if (!m.binding.empty()) last_binding = m.binding;
      if (m.tokens <= 0) continue;
      all.push_back(m);
      if (!std::get<2>(cached)) continue;  // an unconfirmed bound at or under the floor: it cannot win
      floor = std::max(floor, m.tokens);
      if (m.tokens > best.tokens) {
        best.tokens = m.tokens;
        best.grid = m.grid;
        best.binding = m.binding;
      }
    }
  }
  for (const auto& m : all)
    if (m.tokens >= best.tokens && best.tokens > 0) best.reaching.push_back(m);
  if (best.tokens == 0) best.binding = last_binding.empty() ? "device memory" : last_binding;
  return best;
}

}  // namespace

Result<MaxContextResult> max_context(const Plan& base, const TechniqueSet& allowed, bool with_ladder) {
  MaxContextResult r;
  BoundCache cache;
  // The ladder first: each rung's answer is a floor for the next and for the final answer.
  std::int64_t floor = 0;
  if (with_ladder) {
    const std::vector<std::vector<Technique>> rungs = {
        {Technique::Zero3},
        {Technique::Ulysses},
        {Technique::Checkpoint},
        {Technique::OffloadCheckpoints},
        {Technique::TiledMlp, Technique::TiledLoss},
        {Technique::Untied},
        {Technique::Zero1, Technique::Zero2, Technique::OffloadOptimizer, Technique::OffloadParams},
    };
    TechniqueSet so_far;
    for (const auto& rung : rungs) {
      bool added = false;
      for (Technique t : rung)
        if (has(allowed, t)) {
          so_far.set(static_cast<std::size_t>(t));
          added = true;
        }
      if (!added) continue;
      const MaxSeq m = max_seq(base, so_far, cache, floor);
      r.ladder.push_back({technique_names(so_far), m.tokens, m.binding});
      floor = std::max(floor, m.tokens);
    }
  }
  const MaxSeq top = max_seq(base, allowed, cache, floor);
  r.max_tokens = top.tokens;
  r.granularity = top.grid;
  r.binding = top.binding;
  if (top.tokens == 0) {
    Plan p = base;
    p.train.seq = min_tile_tokens(base.model) * base.cluster.shape.world();
    auto b = best_plan(p, allowed);
    if (!b) return b.error();  // names the smallest peak and what dominates it
    return Error{ErrorKind::NoFit, "--budget", fmt::format("no plan fits even at {} tokens ({} binds)", p.train.seq, top.binding)};
  }
  // The fastest plan at that length: only coarse choices whose bound reaches it can fit
  // (any other tiles or chunk only raise their peak).
  std::optional<Plan> fastest;
  for (const auto& m : top.reaching) {
    Plan at = base;
    at.train.seq = top.tokens;
    Knobs k;
    k.micro_batch = 1;
    k.sharding = m.coarse.sharding;
    k.ulysses = m.coarse.ulysses;
    k.checkpoint = m.coarse.checkpoint;
    k.offload_checkpoints = m.coarse.offload_checkpoints;
    k.offload_optimizer = m.coarse.offload_optimizer;
    k.offload_params = m.coarse.offload_params;
    auto found = best_plan(at, allowed, k);
    if (found && (!fastest || faster(found->best, *fastest))) fastest = found->best;
  }
  if (!fastest) return Error{ErrorKind::Internal, "max-context", "the longest plan did not re-evaluate as feasible"};
  r.plan = *fastest;
  // Larger sequence-parallel degrees would spread the tokens further; say which rule forbids them.
  if (has(allowed, Technique::Ulysses))
    for (std::int64_t u = r.plan.parallel.ulysses + 1; u <= base.cluster.shape.world(); ++u) {
      if (base.cluster.shape.world() % u != 0) continue;
      Plan p = r.plan;
      p.parallel.ulysses = static_cast<int>(u);
      p.parallel.head_chunk = 0;
      p.parallel.mlp_tiles = p.parallel.loss_tiles = 1;
      p.train.seq = u * min_tile_tokens(base.model);
      auto valid = validate(p.model, p.cluster.shape, p.train, p.parallel);
      if (!valid) {
        r.rule = fmt::format("ulysses {}: {}", u, valid.error().message);
        break;
      }
    }

  return r;
}

namespace {
nlohmann::json parallel_json(const Plan& p) { return plan_to_json(p)["parallel"]; }
nlohmann::json brief(const Plan& p) {
  return {{"parallel", parallel_json(p)},
          {"micro_batch", p.train.micro_batch},
          {"peak_device_bytes", p.prediction.peak_device_bytes},
          {"peak_host_bytes", p.prediction.peak_host_bytes},
          {"step_time_s", p.prediction.step_time_s},
          {"tokens_per_s", p.prediction.tokens_per_s}};
}
}  // namespace

nlohmann::json search_summary_json(const SearchResult& r) {
  nlohmann::json j = {{"evaluated", r.evaluated}, {"feasible", r.feasible}};
  j["runners_up"] = nlohmann::json::array();
  for (const auto& p : r.runners_up) j["runners_up"].push_back(brief(p));
  j["pareto"] = nlohmann::json::array();
  for (const auto& p : r.pareto) j["pareto"].push_back(brief(p));
  return j;
}

nlohmann::json max_context_json(const MaxContextResult& r) {
  nlohmann::json j = {{"max_tokens", r.max_tokens},
                      {"granularity_tokens", r.granularity},
                      {"binding", r.binding},
                      {"rule", r.rule},
                      {"plan", plan_to_json(r.plan)}};
  j["ladder"] = nlohmann::json::array();
  for (const auto& rung : r.ladder)
    j["ladder"].push_back({{"techniques", rung.techniques}, {"max_tokens", rung.max_tokens}, {"binding", rung.binding}});
  return j;
}

}  // namespace longctx
