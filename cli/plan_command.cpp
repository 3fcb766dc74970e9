#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cluster_options.h"
#include "commands.h"
#include "longctx/planner/memory_model.h"
#include "longctx/planner/search.h"
#include "longctx/planner/units.h"
#include "plan_output.h"

namespace longctx::cli {
namespace {

struct PlanOptions {
  ClusterOptions cluster;
  std::string seq;
  std::string output;
  std::optional<std::string> sharding, checkpoint;
  std::optional<int> ulysses, head_chunk, mlp_tiles, loss_tiles;
  std::optional<std::int64_t> micro_batch;
  bool offload_checkpoints = false, offload_optimizer = false, offload_params = false;
  bool no_offload_checkpoints = false, no_offload_optimizer = false, no_offload_params = false;
  bool no_search = false;
};

Result<Knobs> knobs_from(const PlanOptions& o) {
  Knobs k;
  if (o.sharding) {
    LONGCTX_TRY(k.sharding, parse_sharding(*o.sharding, "--sharding"));
  }
  if (o.checkpoint) {
    LONGCTX_TRY(k.checkpoint, parse_checkpoint(*o.checkpoint, "--checkpoint"));
  }
  k.ulysses = o.ulysses;
  k.head_chunk = o.head_chunk;
  k.mlp_tiles = o.mlp_tiles;
  k.loss_tiles = o.loss_tiles;
  k.micro_batch = o.micro_batch;
  if (o.offload_checkpoints) k.offload_checkpoints = true;
  if (o.no_offload_checkpoints) k.offload_checkpoints = false;
  if (o.offload_optimizer) k.offload_optimizer = true;
  if (o.no_offload_optimizer) k.offload_optimizer = false;
  if (o.offload_params) k.offload_params = true;
  if (o.no_offload_params) k.offload_params = false;
  return k;
}

int run_plan(const PlanOptions& o) {
  auto base = resolve_cluster(o.cluster);
  if (!base) return report(base.error());
  auto seq = parse_tokens(o.seq, "--seq");
  if (!seq) return report(seq.error());
  base->train.seq = *seq;
  auto techniques = parse_techniques(o.cluster.techniques);
  if (!techniques) return report(techniques.error());
  auto knobs = knobs_from(o);
  if (!knobs) return report(knobs.error());

  SearchResult found;
  if (o.no_search) {
    found.best = with_knobs(*base, *knobs);
    auto valid = validate(found.best.model, found.best.cluster.shape, found.best.train, found.best.parallel);
    if (!valid) return report(valid.error());
    found.evaluated = 1;
  } else {
    auto searched = best_plan(*base, *techniques, *knobs);
    if (!searched) return report(searched.error());
    found = std::move(searched).value();
  }
  const Evaluation e = evaluate(found.best);
  if (!o.output.empty()) {
    auto w = write_plan_file(e.plan, o.output);
    if (!w) return report(w.error());
  }
  if (o.cluster.json) {
    nlohmann::json j = plan_to_json(e.plan);
    j["search"] = search_summary_json(found);
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}", render_plan(e));
    if (found.evaluated > 1)
      fmt::print("\nsearch    {} configurations evaluated, {} feasible; fastest chosen\n", found.evaluated, found.feasible);
    if (!o.output.empty()) fmt::print("\nwrote {}\n", o.output);
  }
  if (!e.plan.prediction.feasible) return 3;
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* sub = app.add_subcommand(
      "plan",
      "Predict memory and speed of training at --seq on the cluster. Knobs you give are fixed; the others are "
      "searched for the fastest plan that fits (exit 3 when none does).");
  add_cluster_options(*sub, o->cluster);
  sub->add_option("--seq", o->seq, "Sequence length, e.g. 128K or 1M (K, M = x1024)")->required();
  sub->add_option("-o,--output", o->output, "Write the plan file that `longctx run` reads");
  sub->add_option("--sharding", o->sharding, "none|zero1|zero2|zero3");
  sub->add_option("--ulysses", o->ulysses, "Sequence-parallel degree u (divides the GPUs and the query heads)");
  sub->add_option("--head-chunk", o->head_chunk, "Untied Ulysses: query heads per stage per rank (0: off)");
  sub->add_option("--checkpoint", o->checkpoint, "none|full|every:K");
  sub->add_flag("--offload-checkpoints", o->offload_checkpoints, "Keep checkpointed layer inputs in host memory");
  sub->add_flag("--no-offload-checkpoints", o->no_offload_checkpoints, "Keep checkpoints on the device");
  sub->add_flag("--offload-optimizer", o->offload_optimizer, "fp32 master weights and moments in host memory, step on the CPU");
  sub->add_flag("--no-offload-optimizer", o->no_offload_optimizer, "Optimizer states on the device");
  sub->add_flag("--offload-params", o->offload_params, "zero3 parameter shards in host memory");
  sub->add_flag("--no-offload-params", o->no_offload_params, "Parameter shards on the device");
  sub->add_option("--mlp-tiles", o->mlp_tiles, "Tiles of the MLP over the local sequence (1: untiled)");
  sub->add_option("--loss-tiles", o->loss_tiles, "Tiles of the output projection + loss (1: full logits)");
  sub->add_option("--micro-batch", o->micro_batch, "Samples per data-parallel rank");
  sub->add_flag("--no-search", o->no_search,
                "Evaluate exactly the knobs given, the others at none/1/0/off, even if it does not fit (exit 3 then)");
  return {sub, [o] { return run_plan(*o); }};
}

}  // namespace longctx::cli
