// The footprint functions against counts derived independently of them: the parameter table
// against ModelConfig's own counts, the flash kernel's blocks and GQA's expansion at the
// edges their comments name, and the row-chunked kernels' scratch at long lengths.
#include <gtest/gtest.h>

#include <algorithm>

#include "longctx/planner/footprint/attention.h"
#include "longctx/planner/footprint/mlp.h"
#include "longctx/planner/footprint/norm.h"
#include "longctx/planner/footprint/zero.h"
#include "longctx/planner/row_chunk.h"

namespace longctx {
namespace {

footprint::StepShapes shapes_of(const std::string& model, std::int64_t seq, int ulysses, std::int64_t gpus) {
  StepInputs in;
  in.model = load_model(model).value();
  in.cluster = {1, gpus};
  in.train.seq = seq;
  in.parallel.ulysses = ulysses;
  return footprint::step_shapes(in);
}

TEST(Footprint, TheParameterTableAddsUpToTheModelsCounts) {
  for (const std::string& name : model_preset_names()) {
    const ModelConfig m = load_model(name).value();
    const footprint::StepShapes s = shapes_of(name, 1024, 1, 1);
    EXPECT_EQ(footprint::sum_of_param_sizes(s, 0), m.params_per_layer()) << name;
    EXPECT_EQ(footprint::sum_of_param_sizes(s, footprint::embed_group(s)), m.embedding_params()) << name;
    EXPECT_EQ(footprint::sum_of_param_sizes(s, footprint::head_group(s)), m.hidden + m.output_params()) << name;
    const int biases = (m.qkv_bias ? 3 : 0) + (m.o_bias ? 1 : 0) + (m.mlp_bias ? 3 : 0);
    EXPECT_EQ(footprint::param_sizes(s, 0).size(), (m.qk_norm ? 11 : 9) + biases) << name;
    EXPECT_EQ(footprint::param_sizes(s, footprint::head_group(s)).size(), m.tie_embeddings ? 1 : 2) << name;
    std::int64_t total = 0;
    for (int g = 0; g < footprint::param_groups(s); ++g) total += footprint::group_params(s, g);
    EXPECT_EQ(total, m.total_params()) << name;
  }
}

TEST(Footprint, ShardsCoverTheGroup) {
  // 8 ranks: ceil(group / 8) elements each, never less than the group in all.
  const footprint::StepShapes s = shapes_of("tiny-odd", 768, 1, 8);
  for (int g = 0; g < footprint::param_groups(s); ++g) {
    const std::int64_t shard = footprint::shard_elems(s, g), whole = footprint::group_params(s, g);
    EXPECT_GE(shard * 8, whole);
    EXPECT_LT((shard - 1) * 8, whole);
  }
}

TEST(Footprint, CpuFlashBlocksChangeAtTheirThresholds) {
  EXPECT_EQ(footprint::cpu_flash_q_block(shapes_of("tiny-gqa", 191, 1, 1)), 32);
  EXPECT_EQ(footprint::cpu_flash_q_block(shapes_of("tiny-gqa", 192, 1, 1)), 64);
  EXPECT_EQ(footprint::cpu_flash_q_block(shapes_of("tiny-gqa", 767, 1, 1)), 64);
  EXPECT_EQ(footprint::cpu_flash_q_block(shapes_of("tiny-gqa", 768, 1, 1)), 256);
  EXPECT_EQ(footprint::cpu_flash_kv_block(shapes_of("tiny-gqa", 300, 1, 1)), 300);
  EXPECT_EQ(footprint::cpu_flash_kv_block(shapes_of("tiny-gqa", 4096, 1, 1)), 512);
}

TEST(Footprint, TheCpuKernelComputesWholeKeyBlocksAcrossTheDiagonal) {
  // 2048 tokens: 8 query blocks of 256 walk 512, 512, 1024, 1024, ..., 2048 keys; the causal
  // pairs are 2048^2/2.
  EXPECT_DOUBLE_EQ(footprint::cpu_causal_kernel_pairs(2048), 256.0 * 2 * (512 + 1024 + 1536 + 2048));
  EXPECT_DOUBLE_EQ(footprint::cpu_causal_kernel_pairs(4096) / (4096.0 * 4096 / 2), 1.125);
  // With all the keys inside one block (64 < 512) every query block walks all of them.
  EXPECT_DOUBLE_EQ(footprint::cpu_causal_kernel_pairs(64), 64.0 * 64);
  footprint::StepShapes s = shapes_of("tiny-gqa", 2048, 1, 1);
  EXPECT_DOUBLE_EQ(footprint::attention_kernel_flops(s, 4), footprint::attention_flops(s, 4));  // CUDA: the causal work
  s.cpu = true;
  EXPECT_DOUBLE_EQ(footprint::attention_kernel_flops(s, 4), 1.25 * footprint::attention_flops(s, 4));
  // A ring of 2 over 4096 tokens: chunks of 1024; a rank's two diagonal pairs are causal
  // kernels over 1024 tokens, its other pairs whole blocks.
  footprint::StepShapes ring = shapes_of("tiny-gqa", 4096, 1, 2);
  ring.cpu = true;
  ring.r = 2;
  const double rank_pairs = 4096.0 * 4096 / 4, diagonal_extra = 2 * (footprint::cpu_causal_kernel_pairs(1024) - 1024.0 * 1024 / 2);
  EXPECT_DOUBLE_EQ(footprint::attention_kernel_flops(ring, 4),
                   footprint::attention_flops(ring, 4) * (rank_pairs + diagonal_extra) / rank_pairs);
  EXPECT_GT(diagonal_extra, 0);
}

TEST(Footprint, KvExpansionCopiesOnlyWhenHeadsDifferAndMoreThanOneKvHead) {
  // tiny-gqa: 4 query heads, 2 kv heads, head_dim 16; bf16 (2 bytes).
  const footprint::StepShapes s = shapes_of("tiny-gqa", 256, 1, 1);
  EXPECT_EQ(footprint::kv_expansion(s, 4, 2), 2 * 256 * 4 * 16 * 2);  // k and v [b*S, 4, d]
  EXPECT_EQ(footprint::kv_expansion(s, 4, 4), 0);                     // nothing to expand
  EXPECT_EQ(footprint::kv_expansion(s, 4, 1), 0);                     // a stride-0 view
  footprint::StepShapes cpu = s;
  cpu.cpu = true;
  EXPECT_EQ(footprint::kv_expansion(cpu, 4, 2), 0);  // the CPU kernel takes grouped k and v
}

TEST(Footprint, NormAndSwigluScratchIsOneRowChunkAtAnyLength) {
  // llama-3.1-8b in bf16: h 4096, I 14336. Past a chunk's rows the scratch stops growing.
  const footprint::StepShapes a = shapes_of("llama-3.1-8b", 64 * 1024, 1, 1);
  const footprint::StepShapes b = shapes_of("llama-3.1-8b", 128 * 1024, 1, 1);
  const std::int64_t r = row_chunk(a.n, a.h * 4);
  EXPECT_EQ(r, kRowChunkBytes / (a.h * 4));
  EXPECT_EQ(footprint::rms_norm_backward_workspace(a, a.n, a.h), footprint::rms_norm_backward_workspace(b, b.n, b.h));
  EXPECT_EQ(footprint::rms_norm_backward_scratch(a, a.n, a.h), 8 * a.h + 8 * r * a.h + std::max(a.h, r) * 4);
  EXPECT_EQ(footprint::rms_norm_forward_workspace(a, a.n, a.h), r * a.h * 4);
  EXPECT_EQ(footprint::swiglu_backward_workspace(a), footprint::swiglu_backward_workspace(b));
  EXPECT_LE(footprint::swiglu_backward_workspace(a), kRowChunkBytes);
  // A norm shorter than a chunk is one chunk of all its rows.
  EXPECT_EQ(footprint::rms_norm_forward_workspace(a, 100, a.h), 100 * a.h * 4);
}

}  // namespace
}  // namespace longctx
