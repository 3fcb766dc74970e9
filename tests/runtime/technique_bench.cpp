// CPU step time of each technique against the plain step, same model and length.
// A small Llama (4 layers, hidden 256, 8 query heads over 2 kv heads, vocab 8192) at
// seq 2048: big enough that kernels, not dispatch, set the time. One intra-op thread, so
// figures do not depend on what else the machine runs. docs/performance.md records them.
//   runtime_bench --benchmark_repetitions=6 --benchmark_enable_random_interleaving=true
// (interleaving spreads each technique's repetitions over the run, so load that comes and
// goes hits all of them alike; compare the "_min" rows).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <torch/torch.h>

#include "longctx/runtime/adamw.h"
#include "longctx/runtime/llama_step.h"

namespace longctx::runtime {
namespace {

ModelConfig bench_model() {
  ModelConfig m;
  m.name = "bench-small";
  m.hidden = 256;
  m.intermediate = 688;
  m.layers = 4;
  m.heads = 8;
  m.kv_heads = 2;
  m.head_dim = 32;
  m.vocab = 8192;
  m.rms_norm_eps = 1e-5;
  return m;
}

struct Technique {
  const char* name;
  ParallelConfig p;
};

std::vector<Technique> techniques() {
  auto with = [](auto f) {
    ParallelConfig p;
    f(p);
    return p;
  };
  return {
      {"plain", {}},
      {"checkpoint_full", with([](auto& p) { p.checkpoint = CheckpointPolicy::full(); })},
      {"checkpoint_every2", with([](auto& p) { p.checkpoint = CheckpointPolicy::every_k(2); })},
      {"offload_checkpoints", with([](auto& p) {
         p.checkpoint = CheckpointPolicy::full();
         p.offload_checkpoints = true;
       })},
      {"mlp_tiles8", with([](auto& p) { p.mlp_tiles = 8; })},
      {"loss_tiles8", with([](auto& p) { p.loss_tiles = 8; })},
      {"head_chunk1", with([](auto& p) { p.head_chunk = 1; })},
      {"head_chunk4", with([](auto& p) { p.head_chunk = 4; })},
      {"offload_optimizer", with([](auto& p) { p.offload_optimizer = true; })},
      {"offload_params", with([](auto& p) {
         p.sharding = Sharding::Zero3;
         p.offload_params = true;
       })},
      {"everything", with([](auto& p) {
         p.checkpoint = CheckpointPolicy::full();
         p.offload_checkpoints = true;
         p.head_chunk = 1;
         p.mlp_tiles = 8;
         p.loss_tiles = 8;
         p.offload_optimizer = true;
         p.sharding = Sharding::Zero3;
         p.offload_params = true;
       })},
  };
}

void BM_Step(benchmark::State& state, ParallelConfig p) {
  torch::set_num_threads(1);
  const ModelConfig m = bench_model();
  const std::int64_t S = 2048;
  WeightPlacement where;
  where.layers_in_host_pool = p.offload_params;
  LlamaWeights w = init_weights(m, 1, where);
  AdamW opt(w.all(), {}, p.offload_optimizer, false);
  LlamaStep step(m, p, S, w, torch::kCPU);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto all = at::randint(m.vocab, {1, S + 1}, gen, torch::TensorOptions().dtype(torch::kLong));
  auto tokens = all.narrow(1, 0, S).contiguous(), targets = all.narrow(1, 1, S).contiguous();
  for (auto _ : state) {
    benchmark::DoNotOptimize(step.forward_backward(tokens, targets));
    opt.step();
  }
  state.counters["tokens_per_s"] = benchmark::Counter(double(S), benchmark::Counter::kIsIterationInvariantRate);
}

const bool registered = [] {
  for (const auto& t : techniques())
    benchmark::RegisterBenchmark(t.name, BM_Step, t.p)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(1.0)
        // The fastest repetition: on a shared machine, interference only ever adds time.
        ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  return true;
}();

}  // namespace
}  // namespace longctx::runtime

BENCHMARK_MAIN();
