// The footprint functions against counts derived independently of them: the parameter table
// against ModelConfig's own counts, the flash kernel's blocks and GQA's expansion at the
// edges their comments name, and the row-chunked kernels' scratch at long lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "planner/footprint/attention.h"
#include "planner/footprint/flash_attn.h"
#include "planner/footprint/loss.h"
#include "planner/footprint/mlp.h"
#include "planner/footprint/norm.h"
#include "planner/footprint/torch_ring_attention.h"
#include "planner/footprint/zero.h"
#include "planner/core/row_chunk.h"

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

// The most bytes an OpSpec::workspace_sequence holds at once, and what it still holds at its
// end (0 markers, the outputs' place, hold nothing).
struct SequencePeak {
  std::int64_t peak = 0, held_at_end = 0;
};
SequencePeak sequence_peak(const std::vector<std::int64_t>& sequence) {
  std::vector<std::int64_t> held;
  SequencePeak r;
  for (const std::int64_t entry : sequence) {
    if (entry > 0) {
      held.push_back(entry);
      r.held_at_end += entry;
    } else if (entry < 0) {
      const auto b = static_cast<std::size_t>(-entry - 1);
      EXPECT_LT(b, held.size());
      if (b >= held.size()) return r;
      r.held_at_end -= held[b];
      held[b] = 0;
    }
    r.peak = std::max(r.peak, r.held_at_end);
  }
  return r;
}

// Under GQA on CUDA the flash op's expanded k and v come before its outputs and are its whole
// scratch; elsewhere it is one block (no sequence).
TEST(Footprint, TheFlashOpsBlocksPeakAtItsWorkspace) {
  for (const char* model : {"tiny-gqa", "llama-3.2-1b", "tiny-odd", "llama-3.1-8b"})
    for (const bool cpu : {false, true}) {
      footprint::StepShapes s = shapes_of(model, 4096, 1, 1);
      s.cpu = cpu;
      const auto sequence = footprint::flash_op_forward_workspace_sequence(s);
      const std::string at = std::string(model) + (cpu ? " cpu" : " cuda");
      if (cpu || s.hl == s.kvr || s.kvr == 1) {
        EXPECT_TRUE(sequence.empty()) << at;
        continue;
      }
      ASSERT_EQ(std::count(sequence.begin(), sequence.end(), 0), 1) << at;
      EXPECT_EQ(sequence_peak(sequence).peak, footprint::flash_op_forward_workspace(s)) << at;
    }
}

// flash-attn's backward asks for its outputs, then each scratch buffer in mha_bwd's order,
// and holds them all until it returns: the sequence's peak is the workspace the simulation
// books. Llama-3.1-8B at 600,000 tokens (32 query heads, 8 kv heads, d 128), the sizes from
// the shapes in hopper/flash_api.cpp and csrc/flash_attn/flash_api.cpp written out by hand.
TEST(Footprint, FlashAttnsBackwardAsksForItsBuffersInItsOrder) {
  footprint::StepShapes s = shapes_of("llama-3.1-8b", 600000, 1, 1);
  s.e = 2;
  const std::vector<std::int64_t> fa3 = footprint::flash::fa3_backward_workspace_sequence(s, 32, 8);
  const std::int64_t softmax = 32LL * 600000 * 4, dq_accum = 32LL * 600000 * 128 * 4,
                     kv_accum = 8LL * 600064 * 128 * 4,  // keys rounded up to 128
      semaphore = 600000LL / 64 * 32 * 4;
  EXPECT_EQ(fa3, (std::vector<std::int64_t>{0, softmax, softmax, dq_accum, kv_accum, kv_accum, semaphore}));
  // The accumulators' head size rounded up as round_up_headdim rounds it.
  for (const auto& [d, rounded] : std::vector<std::pair<std::int64_t, std::int64_t>>{{16, 64}, {80, 96}, {128, 128}, {160, 192}, {200, 256}}) {
    footprint::StepShapes u = s;
    u.d = d;
    EXPECT_EQ(footprint::flash::fa3_backward_workspace_sequence(u, 32, 8)[3], 32LL * 600000 * rounded * 4) << d;
  }
  const std::vector<std::int64_t> fa2 = footprint::flash::fa2_backward_workspace_sequence(s, 32, 8);
  const std::int64_t softmax_d = 32LL * 600064 * 4, dq_accum2 = 600064LL * 32 * 128 * 4,
                     expanded = 600000LL * 32 * 128 * 2;  // dk, dv over the query heads, bf16
  EXPECT_EQ(fa2, (std::vector<std::int64_t>{0, softmax_d, dq_accum2, expanded, expanded}));
  for (const char* model : {"tiny-gqa", "tiny-odd", "llama-3.2-1b", "llama-3.1-8b"})
    for (const std::int64_t seq : {1000, 4099, 65536}) {
      const footprint::StepShapes t = shapes_of(model, seq, 1, 1);
      for (const std::int64_t kv : {t.kvr, t.hl}) {  // grouped, and one kv head per query head
        const std::string at = std::string(model) + " seq " + std::to_string(seq) + " kv " + std::to_string(kv);
        const auto three = footprint::flash::fa3_backward_workspace_sequence(t, t.hl, kv);
        const auto two = footprint::flash::fa2_backward_workspace_sequence(t, t.hl, kv);
        ASSERT_FALSE(three.empty()) << at;
        EXPECT_EQ(three.front(), 0) << at;
        EXPECT_EQ(two.front(), 0) << at;
        EXPECT_EQ(three.size(), kv == t.hl ? 5U : 7U) << at;
        EXPECT_EQ(sequence_peak(three).peak, footprint::flash::fa3_backward_workspace(t, t.hl, kv)) << at;
        EXPECT_EQ(sequence_peak(two).peak, footprint::flash::fa2_backward_workspace(t, t.hl, kv)) << at;
      }
    }
}

// The tiled loss's blocks, requested and returned in order, peak at the workspace the
// simulation books and all return: bf16 and fp32, tiles that divide the rows and tiles that
// leave a short last one (or, rounded, fewer tiles than asked).
TEST(Footprint, TheTiledLossBlocksPeakAtItsWorkspaceAndAllReturn) {
  for (const char* model : {"tiny-gqa", "llama-3.2-1b", "tiny-odd"})
    for (const std::int64_t seq : {1000, 4096, 4099})
      for (const std::int64_t tiles : {2, 3, 7, 123})
        for (const std::int64_t e : {2, 4})
          for (const bool backward : {false, true}) {
            footprint::StepShapes s = shapes_of(model, seq, 1, 1);
            s.e = e;
            const SequencePeak blocks = sequence_peak(footprint::tiled_loss_workspace_sequence(s, tiles, backward));
            const std::string at = std::string(model) + " seq " + std::to_string(seq) + " tiles " +
                                   std::to_string(tiles) + " e " + std::to_string(e) + (backward ? " bwd" : " fwd");
            EXPECT_EQ(blocks.peak, footprint::tiled_loss_workspace(s, tiles)) << at;
            EXPECT_EQ(blocks.held_at_end, 0) << at;
          }
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
  // The forward's fp32 copy of a chunk is the CPU's; CUDA's reduction converts as it loads
  // and only the chunk's rstd, rounded to bf16, is scratch.
  footprint::StepShapes a_cpu = a;
  a_cpu.cpu = true;
  EXPECT_EQ(footprint::rms_norm_forward_workspace(a_cpu, a.n, a.h), r * a.h * 4);
  EXPECT_EQ(footprint::rms_norm_forward_workspace(a, a.n, a.h), r * a.e);
  EXPECT_EQ(footprint::swiglu_backward_workspace(a), footprint::swiglu_backward_workspace(b));
  EXPECT_LE(footprint::swiglu_backward_workspace(a), kRowChunkBytes);
  // A norm shorter than a chunk is one chunk of all its rows.
  EXPECT_EQ(footprint::rms_norm_forward_workspace(a_cpu, 100, a.h), 100 * a.h * 4);
  EXPECT_EQ(footprint::rms_norm_forward_workspace(a, 100, a.h), 100 * a.e);
}


// PyTorch's ring attention returns out and lse (forward), dq and the dk/dv pair (backward), and
// lets everything else go, whatever the ring, the rank, the exchange or the device; byte-exact
// against torch itself in tests/stacks/test_torch_ring_attention.py.
TEST(TorchRingAttention, ReturnsItsOutputsAndNothingElse) {
  namespace tr = footprint::torch_ring;
  for (int world : {1, 2, 3, 4})
    for (int rank = 0; rank < world; ++rank)
      for (bool lb : {false, true})
        for (tr::Rotate rotate : {tr::Rotate::AllGather, tr::Rotate::AllToAll})
          for (std::int64_t e : {2, 4})
            for (bool cpu : {false, true}) {
              const tr::RingShape s{.b = 2, .q_heads = 6, .kv_heads = 2, .local_seq = 96, .head_dim = 16, .elem = e,
                                    .world = world, .rank = rank, .load_balance = lb, .rotate = rotate, .cpu = cpu};
              const std::int64_t out = 2 * 6 * 96 * 16 * e, lse = 2 * 6 * 96 * 4, kv = 2 * 2 * 96 * 16 * e;
              const tr::RingMemory f = tr::forward_memory(s), g = tr::backward_memory(s);
              EXPECT_EQ(f.returned, out + lse) << world << " " << rank;
              EXPECT_EQ(g.returned, out + 2 * kv) << world << " " << rank;
              EXPECT_GE(f.peak, f.returned);
              EXPECT_GE(g.peak, g.returned);
            }
}

// All-gather holds every rank's k/v pair through the forward; all-to-all one pair in flight.
// Runs of like steps cut to three replay as the whole ring does: the same peak and the same
// outputs, on every rank of rings up to 13, either rotation, load balanced or not, GPU or CPU.
TEST(TorchRingAttention, ReplayingRunsOfThreeStepsEqualsEveryStep) {
  namespace tr = footprint::torch_ring;
  for (int world = 2; world <= 13; ++world)
    for (int rank = 0; rank < world; ++rank)
      for (const auto rotate : {tr::Rotate::AllGather, tr::Rotate::AllToAll})
        for (const bool balance : {true, false})
          for (const bool cpu : {true, false})
            for (const std::int64_t e : {2, 4}) {
              tr::RingShape s{.b = 2, .q_heads = 6, .kv_heads = 2, .local_seq = 64, .head_dim = 16, .elem = e,
                              .world = world, .rank = rank, .load_balance = balance, .rotate = rotate,
                              .grad_out_bshd = false, .cpu = cpu};
              tr::RingShape every = s;
              every.every_step = true;
              const auto f = tr::forward_memory(s), ff = tr::forward_memory(every);
              const auto g = tr::backward_memory(s), gg = tr::backward_memory(every);
              ASSERT_EQ(f.peak, ff.peak) << world << " " << rank;
              ASSERT_EQ(f.returned, ff.returned) << world << " " << rank;
              ASSERT_EQ(g.peak, gg.peak) << world << " " << rank;
              ASSERT_EQ(g.returned, gg.returned) << world << " " << rank;
            }
}

TEST(TorchRingAttention, AllGatherHoldsEveryRanksPair) {
  namespace tr = footprint::torch_ring;
  tr::RingShape s{.b = 1, .q_heads = 8, .kv_heads = 8, .local_seq = 4096, .head_dim = 128, .elem = 2, .world = 8,
                  .rank = 3, .rotate = tr::Rotate::AllGather};
  const std::int64_t pair = 2 * 8 * 4096 * 128 * 2;
  const std::int64_t gathered = tr::forward_memory(s).peak;
  EXPECT_GE(gathered, 8 * pair);
  // All-to-all: the copies of k and v, the pair sent, the pair received and the one attended.
  s.rotate = tr::Rotate::AllToAll;
  EXPECT_LT(tr::forward_memory(s).peak, gathered - 3 * pair);
}

}  // namespace
}  // namespace longctx
