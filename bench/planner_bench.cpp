// Planner speed: one evaluation, one search, and the full max-context query with its ladder
// (the goal: each max-context query under 200 ms on one core). Figures: docs/performance.md.
#include <benchmark/benchmark.h>

#include "planner/search/memory_model.h"
#include "planner/search/search.h"

namespace longctx {
namespace {

Plan base(const char* model, std::int64_t gpus, std::int64_t seq) {
  Plan p;
  p.model = load_model(model).value();
  p.cluster.hardware = load_hardware("h100-80gb").value();
  p.cluster.shape = {gpus / 8, 8};
  p.cluster.device_budget_bytes = p.cluster.hardware.device_memory_bytes;
  p.cluster.host_budget_bytes_per_node = p.cluster.hardware.host_memory_bytes_per_node;
  p.train.seq = seq;
  return p;
}

void BM_PredictOne8B(benchmark::State& state) {
  Plan p = base("llama-3.1-8b", 8, 1 << 20);
  p.parallel.sharding = Sharding::Zero3;
  p.parallel.ulysses = 8;
  p.parallel.head_chunk = 1;
  p.parallel.checkpoint = CheckpointPolicy::full();
  p.parallel.offload_checkpoints = true;
  p.parallel.mlp_tiles = 16;
  p.parallel.loss_tiles = 16;
  for (auto _ : state) benchmark::DoNotOptimize(predict(p));
}
BENCHMARK(BM_PredictOne8B)->Unit(benchmark::kMicrosecond);

void BM_BestPlan8B_1M(benchmark::State& state) {
  const Plan p = base("llama-3.1-8b", 8, 1 << 20);
  for (auto _ : state) benchmark::DoNotOptimize(best_plan(p, all_techniques()));
}
BENCHMARK(BM_BestPlan8B_1M)->Unit(benchmark::kMillisecond);

void BM_MaxContext8B_8Gpus(benchmark::State& state) {
  const Plan p = base("llama-3.1-8b", 8, 0);
  for (auto _ : state) benchmark::DoNotOptimize(max_context(p, all_techniques()));
}
BENCHMARK(BM_MaxContext8B_8Gpus)->Unit(benchmark::kMillisecond);

void BM_MaxContext70B_64Gpus(benchmark::State& state) {
  const Plan p = base("llama-3.1-70b", 64, 0);
  for (auto _ : state) benchmark::DoNotOptimize(max_context(p, all_techniques()));
}
BENCHMARK(BM_MaxContext70B_64Gpus)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace longctx

BENCHMARK_MAIN();
