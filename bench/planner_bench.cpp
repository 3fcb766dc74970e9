// Planner speed: one evaluation, and the queries of docs/performance.md as the CLI asks them
// (request.h), each with the work it took beside its time: step graphs built, caching-allocator
// replays run, and the replays' script items replayed one by one and skipped as repeats
// (work_counts.h). The goal: max-context under 100 ms for Llama-3.1-8B on 1 and 8 GPUs, under
// 300 ms for 70B on 64 and Qwen3-32B on 8, on every stack.
#include <benchmark/benchmark.h>

#include "planner/graph/work_counts.h"
#include "planner/search/memory_model.h"
#include "planner/search/request.h"

namespace longctx {
namespace {

// Per iteration: the counts of the whole run divided by its iterations.
void report_work(benchmark::State& state, const WorkCounts& before) {
  const WorkCounts& now = work_counts();
  auto per_iteration = [](std::int64_t n) { return benchmark::Counter(double(n), benchmark::Counter::kAvgIterations); };
  state.counters["graphs"] = per_iteration(now.graphs - before.graphs);
  state.counters["whole"] = per_iteration(now.whole_graphs - before.whole_graphs);
  state.counters["replays"] = per_iteration(now.replays - before.replays);
  state.counters["items"] = per_iteration(now.replayed_items - before.replayed_items);
  state.counters["skipped"] = per_iteration(now.skipped_items - before.skipped_items);
}

void BM_PredictOne8B(benchmark::State& state) {
  Plan p = resolve_cluster({}).value();
  p.train.seq = 1 << 20;
  p.parallel.sharding = Sharding::Zero3;
  p.parallel.ulysses = 8;
  p.parallel.head_chunk = 1;
  p.parallel.checkpoint = CheckpointPolicy::full();
  p.parallel.offload_checkpoints = true;
  p.parallel.mlp_tiles = 16;
  p.parallel.loss_tiles = 16;
  const WorkCounts before = work_counts();
  for (auto _ : state) benchmark::DoNotOptimize(predict(p));
  report_work(state, before);
}
BENCHMARK(BM_PredictOne8B)->Unit(benchmark::kMicrosecond);

ClusterRequest cluster(const char* model, std::int64_t gpus, const char* stack = "longctx") {
  ClusterRequest r;
  r.model = model;
  r.gpus = gpus;
  r.stack = stack;
  return r;
}

// `longctx max-context` with its ladder (--no-ladder where `ladder` is false).
void max_context_query(benchmark::State& state, const ClusterRequest& r, bool ladder) {
  const WorkCounts before = work_counts();
  for (auto _ : state) benchmark::DoNotOptimize(answer_max_context(r, ladder).value());
  report_work(state, before);
}

// `longctx plan --seq SEQ` with every knob searched.
void plan_query(benchmark::State& state, const ClusterRequest& r, const char* seq) {
  PlanRequest p;
  p.cluster = r;
  p.seq = seq;
  const WorkCounts before = work_counts();
  for (auto _ : state) benchmark::DoNotOptimize(answer_plan(p).value());
  report_work(state, before);
}

BENCHMARK_CAPTURE(max_context_query, 8B_1gpu, cluster("llama-3.1-8b", 1), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(max_context_query, 8B_8gpu, cluster("llama-3.1-8b", 8), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(max_context_query, qwen3_32B_8gpu, cluster("qwen3-32b", 8), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(max_context_query, 70B_64gpu, cluster("llama-3.1-70b", 64), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(max_context_query, hf_1B_1gpu, cluster("llama-3.2-1b", 1, "hf"), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(max_context_query, arctic_8B_8gpu, cluster("llama-3.1-8b", 8, "arctic"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(max_context_query, torchtitan_8B_8gpu, cluster("llama-3.1-8b", 8, "torchtitan"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(max_context_query, torchtitan_70B_64gpu, cluster("llama-3.1-70b", 64, "torchtitan"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(plan_query, 8B_8gpu_1M, cluster("llama-3.1-8b", 8), "1M")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(plan_query, 70B_64gpu_4M, cluster("llama-3.1-70b", 64), "4M")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(plan_query, torchtitan_70B_64gpu_512K, cluster("llama-3.1-70b", 64, "torchtitan"), "512K")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(plan_query, arctic_70B_64gpu_4M, cluster("llama-3.1-70b", 64, "arctic"), "4M")
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace longctx

BENCHMARK_MAIN();
