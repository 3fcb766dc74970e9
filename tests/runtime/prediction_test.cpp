// Measured beside predicted on the CPU virtual device, per configuration and per phase.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "longctx/runtime/prediction.h"
#include "longctx/runtime/runner.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

using testing::with;

TEST(Prediction, MeasuredBesidePredicted) {
  struct Config { std::string name, model; std::int64_t seq, b; ParallelConfig p; };
  std::vector<Config> configs = {
      {"plain", "tiny-gqa", 256, 4, {}},
      {"ckpt full", "tiny-gqa", 256, 4, with([](auto& p) { p.checkpoint = CheckpointPolicy::full(); })},
      {"ckpt+offload", "tiny-gqa", 256, 4, with([](auto& p) { p.checkpoint = CheckpointPolicy::full(); p.offload_checkpoints = true; })},
      {"mlp tiles 8", "tiny-gqa", 256, 4, with([](auto& p) { p.mlp_tiles = 8; })},
      {"loss tiles 8", "tiny-gqa", 256, 4, with([](auto& p) { p.loss_tiles = 8; })},
      {"head chunk 1", "tiny-gqa", 256, 4, with([](auto& p) { p.head_chunk = 1; })},
      {"offload optim", "tiny-gqa", 256, 4, with([](auto& p) { p.offload_optimizer = true; })},
      {"plain odd", "tiny-odd", 256, 4, {}},
      {"all odd", "tiny-odd", 256, 4, with([](auto& p) { p.checkpoint = CheckpointPolicy::full(); p.offload_checkpoints = true; p.head_chunk = 2; p.mlp_tiles = 8; p.loss_tiles = 8; })},
      // Biases: q/k/v/o and MLP (tiny-bias), q/k/v only (tiny-qwen2).
      {"plain bias", "tiny-bias", 256, 4, {}},
      {"all bias", "tiny-bias", 256, 4, with([](auto& p) { p.checkpoint = CheckpointPolicy::full(); p.offload_checkpoints = true; p.mlp_tiles = 8; p.loss_tiles = 8; p.offload_optimizer = true; })},
      {"plain qwen2", "tiny-qwen2", 256, 4, {}},
  };
  std::printf("%-14s %12s %12s %8s %10s %10s  %s\n", "config", "measured", "predicted", "error", "host meas", "host pred", "peak phase");
  for (const auto& c : configs) {
    const auto plan = testing::tiny_plan(c.model, c.seq, c.b, c.p);
    const auto pred = predict_step(plan);
    auto run = run_plan(plan, {});
    ASSERT_TRUE(run.ok()) << run.error().what();
    std::string peak_phase;
    std::int64_t best = -1;
    for (const auto& ph : run->steps[0].phases) if (ph.peak_device > best) best = ph.peak_device, peak_phase = ph.name;
    const double err = double(run->peak_device - pred.totals.peak_device_bytes) / double(pred.totals.peak_device_bytes);
    std::printf("%-14s %12lld %12lld %+7.1f%% %10lld %10lld  %s (planner: %s)\n", c.name.c_str(), (long long)run->peak_device,
                (long long)pred.totals.peak_device_bytes, 100 * err, (long long)run->peak_host,
                (long long)pred.totals.peak_host_bytes, peak_phase.c_str(), pred.totals.peak_at.c_str());
    // The runtime follows the planner's inventory op by op: within the validation label's
    // bound (docs/validation.md).
    EXPECT_LT(std::abs(err), 0.01) << c.name;
    if (c.name == "plain" || c.name == "all odd") {
      for (const auto& ph : run->steps[0].phases) {
        auto it = pred.phases.find(ph.name);
        std::printf("    %-20s %12lld %12lld\n", ph.name.c_str(), (long long)ph.peak_device,
                    it == pred.phases.end() ? -1LL : (long long)it->second.peak_device_bytes);
      }
    }
  }
}

}  // namespace
}  // namespace longctx::runtime

namespace longctx::runtime {
namespace {
// Writes the runtime's allocations and the planner's per-op live bytes for one configuration
// (LONGCTX_INVENTORY_DUMP=dir), to compare them op by op; skipped otherwise.
TEST(Prediction, DumpInventory) {
  const char* dir = std::getenv("LONGCTX_INVENTORY_DUMP");
  if (!dir) GTEST_SKIP() << "set LONGCTX_INVENTORY_DUMP to a folder to write the dumps";
  const auto plan = testing::tiny_plan(std::getenv("LONGCTX_DUMP_MODEL") ? std::getenv("LONGCTX_DUMP_MODEL") : "tiny-gqa", 256, 4, {});
  std::FILE* f = std::fopen((std::string(dir) + "/runtime.txt").c_str(), "w");
  RunOptions o;
  o.allocation_log = f;
  ASSERT_TRUE(run_plan(plan, o).ok());
  std::fclose(f);
}
}  // namespace
}  // namespace longctx::runtime
