// Fuzzes plan evaluation: bytes decoded into a model, cluster, training settings and
// parallel knobs. Whatever validate() accepts, predict() must evaluate without crash,
// undefined behaviour or negative sizes, and the plan file must read back (plan_from_json
// accepts what validate() accepts). The cost of one evaluation is bounded by validate()
// (longctx::limits), not here: sizes are drawn over the whole int64 range now and then.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>
#include <nlohmann/json.hpp>

#include "contract.h"

#include "planner/core/hardware.h"
#include "planner/core/limits.h"
#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "planner/stacks/stack_tiles.h"

namespace {


// Mostly small sizes (where configurations validate and the step graph gets built), some
// up to a few times the bounds, and now and then any int64 at all.
std::int64_t size(FuzzedDataProvider& in, std::int64_t typical) {
  const auto mode = in.ConsumeIntegral<std::uint8_t>();
  if (mode < 192) return in.ConsumeIntegralInRange<std::int64_t>(1, typical);
  if (mode < 248) return in.ConsumeIntegralInRange<std::int64_t>(-2, std::int64_t{1} << 42);
  return in.ConsumeIntegral<std::int64_t>();
}

int small_int(FuzzedDataProvider& in, int typical) {
  const auto mode = in.ConsumeIntegral<std::uint8_t>();
  if (mode < 224) return in.ConsumeIntegralInRange<int>(0, typical);
  return in.ConsumeIntegral<int>();
}

const std::vector<longctx::Hardware>& hardware_presets() {
  static const std::vector<longctx::Hardware> all = [] {
    std::vector<longctx::Hardware> v;
    for (const auto& name : longctx::hardware_preset_names())
      if (auto h = longctx::load_hardware(name)) v.push_back(*h);
    return v;
  }();
  return all;
}

void draw_model(FuzzedDataProvider& in, longctx::Plan& p) {
  auto& m = p.model;
  m.name = "fuzz";
  m.model_type = in.ConsumeBool() ? "qwen3" : "llama";
  m.qk_norm = m.model_type == "qwen3";
  m.heads = size(in, 64);
  m.kv_heads = in.ConsumeBool() && m.heads > 0 ? m.heads / in.ConsumeIntegralInRange<std::int64_t>(1, 8) : size(in, 16);
  m.head_dim = size(in, 128);
  if (m.head_dim % 2 != 0 && in.ConsumeBool()) m.head_dim ^= 1;  // mostly even, as RoPE needs
  // Wrapping (unsigned) product: the decoder itself must not overflow.
  m.hidden = in.ConsumeBool() ? std::int64_t(std::uint64_t(m.heads) * std::uint64_t(m.head_dim)) : size(in, 8192);
  m.intermediate = size(in, 32768);
  m.layers = size(in, 8);
  m.vocab = size(in, 1 << 17);
  m.tie_embeddings = in.ConsumeBool();

}

void draw_cluster(FuzzedDataProvider& in, longctx::Plan& p) {
  const auto& hw = hardware_presets();
  if (hw.empty()) longctx::fuzz::fail("no hardware presets");
  p.cluster.hardware = hw[in.ConsumeIntegralInRange<std::size_t>(0, hw.size() - 1)];
  p.cluster.shape.nodes = size(in, 4);
  p.cluster.shape.gpus_per_node = size(in, 8);
  p.cluster.device_budget_bytes = size(in, std::int64_t{1} << 40);
  p.cluster.host_budget_bytes_per_node = size(in, std::int64_t{1} << 42);

}

void draw_train_and_knobs(FuzzedDataProvider& in, longctx::Plan& p) {
  p.train.seq = size(in, 1 << 20);
  p.train.micro_batch = size(in, 4);
  p.train.dtype = in.ConsumeBool() ? longctx::DType::FP32 : longctx::DType::BF16;
  p.train.grad_dtype = in.ConsumeBool() ? longctx::DType::BF16 : longctx::DType::FP32;

  auto& par = p.parallel;
  par.sharding = static_cast<longctx::Sharding>(in.ConsumeIntegralInRange<int>(0, 3));
  par.ulysses = small_int(in, 16);
  par.head_chunk = small_int(in, 16);
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: par.checkpoint = longctx::CheckpointPolicy::none(); break;
    case 1: par.checkpoint = longctx::CheckpointPolicy::full(); break;
    default: par.checkpoint = longctx::CheckpointPolicy::every_k(small_int(in, 4)); break;
  }
  par.offload_checkpoints = in.ConsumeBool();
  par.offload_optimizer = in.ConsumeBool();
  par.offload_params = in.ConsumeBool();
  par.mlp_tiles = small_int(in, 64);
  par.loss_tiles = small_int(in, 64);
  // Ring attention now and then, with either k/v exchange.
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    par.ring = small_int(in, 8);
    par.ring_exchange = in.ConsumeBool() ? longctx::RingExchange::AllGather : longctx::RingExchange::P2p;
  }

}

void draw_stack(FuzzedDataProvider& in, longctx::Plan& p) {
  auto& par = p.parallel;
  // Now and then the hf stack, mostly with the knobs it accepts (one GPU, no sharding, tiling
  // or offload, gradients in the parameters' dtype) so that its graph gets built.
  if (in.remaining_bytes() > 0 && in.ConsumeIntegral<std::uint8_t>() < 64) {
    auto& st = p.train.stack;
    st.kind = longctx::StackKind::HF;
    st.attention = in.ConsumeBool() ? longctx::HfAttention::Eager : longctx::HfAttention::Sdpa;
    st.checkpointing = in.ConsumeBool() ? longctx::HfCheckpointing::Reentrant : longctx::HfCheckpointing::NonReentrant;
    st.attention_mask = in.ConsumeBool();
    st.use_cache = in.ConsumeBool();
    st.optimizer = in.ConsumeBool() ? longctx::HfOptimizer::AdamWTorch : longctx::HfOptimizer::AdamWTorchFused;
    st.loss = in.ConsumeBool() ? longctx::HfLoss::TrlChunkedNll : longctx::HfLoss::Transformers;
    if (in.ConsumeBool()) {
      p.cluster.shape = {1, 1};
      p.train.grad_dtype = p.train.dtype;
      par = longctx::ParallelConfig{};
      if (in.ConsumeBool()) par.checkpoint = longctx::CheckpointPolicy::full();
    }
  }

  // Now and then the arctic stack, with the knobs it decides set as it sets them.
  else if (in.remaining_bytes() > 0 && in.ConsumeIntegral<std::uint8_t>() < 64) {
    auto& st = p.train.stack;
    st = longctx::default_stack(longctx::StackKind::Arctic);
    st.arctic_model = in.ConsumeBool() ? longctx::ArcticModel::HuggingFace : longctx::ArcticModel::Liger;
    if (in.ConsumeBool()) st.attention = longctx::HfAttention::FlashAttention3;
    p.train.dtype = p.train.grad_dtype = longctx::DType::BF16;
    if (par.checkpoint.kind == longctx::CheckpointPolicy::Kind::EveryK) par.checkpoint = longctx::CheckpointPolicy::full();
    par.head_chunk = 0;
    if (par.mlp_tiles > 1 && longctx::stack_tiles_defined(p.model, p.train, par.ulysses))
      par.mlp_tiles = static_cast<int>(*longctx::stack_tile_count(p.model, p.train, par.ulysses, false));
    longctx::conform_to_stack(p.model, p.cluster.shape, p.train, par);
  }

  // Now and then the torchtitan stack, mostly on one GPU in fp32 with its checkpointing modes.
  else if (in.remaining_bytes() > 0 && in.ConsumeIntegral<std::uint8_t>() < 64) {
    p.train.stack = longctx::default_stack(longctx::StackKind::Torchtitan);
    if (in.ConsumeBool()) {
      p.cluster.shape = {1, 1};
      p.train.dtype = p.train.grad_dtype = longctx::DType::FP32;
      const longctx::CheckpointPolicy checkpoint = par.checkpoint;
      par = longctx::ParallelConfig{};
      par.checkpoint = checkpoint;
    } else if (p.cluster.shape.nodes != 1 || p.cluster.shape.gpus_per_node != 1) {  // no product: unbounded yet
      p.train.grad_dtype = longctx::DType::FP32;  // FSDP2's gradient shards
    }
  }
}

}  // namespace

using longctx::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size_bytes) {
  FuzzedDataProvider in(data, size_bytes);
  longctx::Plan p;
  draw_model(in, p);
  draw_cluster(in, p);
  draw_train_and_knobs(in, p);
  draw_stack(in, p);
  if (!longctx::validate(p)) return 0;

  const longctx::Prediction pr = longctx::predict(p);
  if (pr.peak_device_bytes < 0 || pr.peak_host_bytes < 0) fail("negative peak");
  for (const auto& [category, bytes] : pr.breakdown)
    if (bytes < 0) fail("negative breakdown", category);

  // What validate() accepts, a plan file must carry (budgets have their own bounds).
  if (p.cluster.device_budget_bytes >= 1 && p.cluster.device_budget_bytes <= longctx::limits::kMaxBytes &&
      p.cluster.host_budget_bytes_per_node >= 1 && p.cluster.host_budget_bytes_per_node <= longctx::limits::kMaxBytes) {
    p.prediction = pr;
    const auto back = longctx::plan_from_json(longctx::plan_to_json(p));
    if (!back) fail("plan_from_json refused a plan validate() accepted:", back.error().what());
    if (!(back->parallel == p.parallel)) fail("parallel knobs changed in the plan file");
    if (!(back->train.stack == p.train.stack)) fail("the stack changed in the plan file");
  }
  return 0;
}
