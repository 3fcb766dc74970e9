#include "planner/footprint/torch_ring_attention.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "planner/footprint/attention.h"
#include "planner/footprint/flash_attn.h"

namespace longctx::footprint::torch_ring {
namespace {

// Python's names and the blocks they hold: a block is freed when the last name holding it
// lets go. `peak` is the most allocated at once, `live` what is allocated now.
class Replay {
 public:
  // name = a new block of `bytes`.
  void hold(const std::string& name, std::int64_t bytes) { bind(name, allocate(bytes)); }
  // name = whatever `other` holds (a view, or the same tensor).
  void alias(const std::string& name, const std::string& other) { bind(name, held(other)); }
  void drop(const std::string& name) { bind(name, kNone); }
  // A temporary made and freed inside one call.
  void scratch(std::int64_t bytes) {
    hold("(scratch)", bytes);
    drop("(scratch)");
  }
  bool holds(const std::string& name) const { return held(name) != kNone; }
  // Every name but `kept` lets go (a function returns what `kept` name).
  void drop_all_but(std::initializer_list<const char*> kept) {
    std::vector<std::string> going;
    for (const auto& [name, block] : names_)
      if (std::find(kept.begin(), kept.end(), name) == kept.end()) going.push_back(name);
    for (const std::string& name : going) drop(name);
  }
  std::int64_t peak() const { return peak_; }
  std::int64_t live() const { return live_; }

 private:
  static constexpr int kNone = -1;
  struct Block {
    std::int64_t bytes = 0;
    int refs = 0;
  };
  int allocate(std::int64_t bytes) {
    blocks_.push_back({bytes, 0});
    live_ += bytes;
    if (live_ > peak_) peak_ = live_;
    return static_cast<int>(blocks_.size()) - 1;
  }
  int held(const std::string& name) const {
    const auto it = names_.find(name);
    return it == names_.end() ? kNone : it->second;
  }
  void bind(const std::string& name, int block) {
    if (block != kNone) ++blocks_[static_cast<std::size_t>(block)].refs;
    const int old = held(name);
    if (block == kNone) names_.erase(name);
    else names_[name] = block;
    release(old);
  }
  void release(int block) {
    if (block == kNone) return;
    Block& b = blocks_[static_cast<std::size_t>(block)];
    if (--b.refs == 0) live_ -= b.bytes;
  }
  std::vector<Block> blocks_;
  std::map<std::string, int> names_;
  std::int64_t live_ = 0, peak_ = 0;
};

// _is_causal_behavior: whether step i attends at all (without load balancing a rank skips the
// blocks of ranks after it).
bool skipped(const RingShape& s, int i) {
  const int source = ((s.rank - i) % s.world + s.world) % s.world;
  return i > 0 && !s.load_balance && source >= s.rank;
}

// The block step i attends: query rows, key rows, and whether only the second half of the
// queries is merged (load balancing: steps up to the rank read the first half of the keys,
// later ones only the second half of the queries).
struct StepBlock {
  std::int64_t q_rows, kv_rows;
  bool partial;
};
StepBlock block_of(const RingShape& s, int i) {
  const std::int64_t Sl = s.local_seq;
  if (i == 0 || !s.load_balance) return {Sl, Sl, false};
  if (i <= s.rank) return {Sl, Sl / 2, false};
  return {Sl - Sl / 2, Sl, true};
}

// The steps replayed (RingShape::every_step): 0, then the runs 1..rank and rank+1..world-1,
// each cut to its first two steps and its last.
std::vector<int> steps_of(const RingShape& s) {
  std::vector<int> steps;
  auto run = [&](int first, int last) {
    for (int i = first; i <= last; ++i)
      if (s.every_step || i < first + 2 || i == last) steps.push_back(i);
  };
  steps.push_back(0);
  run(1, std::min(s.rank, s.world - 1));
  run(std::max(s.rank + 1, 1), s.world - 1);
  return steps;
}

// The k/v pair's exchange at a step (all but the last): cat(k, v) held by next_kv, then the
// rotater's receive buffer. All-gather gathers once, at the first step.
void exchange_kv(Replay& m, const RingShape& s, std::int64_t pair_bytes) {
  m.hold("next_kv", pair_bytes);
  if (s.rotate == Rotate::AllGather) {
    if (!m.holds("kv_rotater")) m.hold("kv_rotater", s.world * pair_bytes);
  } else {
    m.hold("kv_rotater", pair_bytes);
  }
}

// _SDPAMerger.step for a block of `rows` query rows whose fp32 output is held by "block_out32"
// and lse by "block_lse" (first: they become the running ones).
void merge(Replay& m, const RingShape& s, std::int64_t rows, bool partial, bool first) {
  const std::int64_t b = s.b, H = s.q_heads, d = s.head_dim, Sl = s.local_seq;
  if (first) {
    m.alias("merged_lse", "block_lse");
    m.alias("merged_out", "block_out32");
    return;
  }
  const std::int64_t lse_rows = b * H * rows * 4, out_rows = b * H * rows * d * 4;
  // out = out - sigmoid(block_lse - lse) * (out - block_out)
  m.hold("diff", lse_rows);
  m.hold("sig", lse_rows);
  m.drop("diff");
  m.hold("delta", out_rows);
  m.hold("scaled", out_rows);
  m.drop("sig");
  m.drop("delta");
  m.hold("new_out", out_rows);
  m.drop("scaled");
  // lse = lse - logsigmoid(lse - block_lse): log_sigmoid_forward's output and buffer (the
  // buffer freed on return; its third block, where one is made, never meets the peak above).
  m.hold("diff", lse_rows);
  m.hold("logsig", lse_rows);
  m.scratch(lse_rows);
  m.drop("diff");
  m.hold("new_lse", lse_rows);
  m.drop("logsig");
  if (partial) {
    // _partial_update: torch.cat of the first half and the new second half, lse then out.
    m.hold("merged_lse", b * H * Sl * 4);
    m.hold("merged_out", b * H * Sl * d * 4);
  } else {
    m.alias("merged_lse", "new_lse");
    m.alias("merged_out", "new_out");
  }
  m.drop("new_out");
  m.drop("new_lse");
}

}  // namespace

bool forward_output_bshd(const RingShape& s) {
  const bool merged_half = s.load_balance && s.rank < s.world - 1;
  return s.qkv_transposed && !merged_half;
}

RingMemory forward_memory(const RingShape& s) {
  Replay m;
  const std::int64_t b = s.b, H = s.q_heads, K = s.kv_heads, Sl = s.local_seq, d = s.head_dim, e = s.elem;
  const std::int64_t kv = b * K * Sl * d * e;
  // key.contiguous(), value.contiguous()
  if (s.qkv_transposed && K > 1) {
    m.hold("key", kv);
    m.hold("value", kv);
  }
  bool first = true;
  for (const int i : steps_of(s)) {
    if (i > 0) {
      // next_kv = rotater.next_buffer(); key, value = its views
      m.alias("next_kv", "kv_rotater");
      m.alias("key", "next_kv");
      m.alias("value", "next_kv");
    }
    if (i < s.world - 1) {
      exchange_kv(m, s, 2 * kv);
      m.drop("next_kv");  // next_kv = rotater.exchange_buffers(...) returns None
    }
    if (skipped(s, i)) continue;
    const StepBlock blk = block_of(s, i);
    m.alias("k", "key");
    m.alias("v", "value");
    // The kernel: out (q's rows) and lse [b, H, rows] fp32, then its scratch (CPU).
    m.hold("kernel_out", b * H * blk.q_rows * d * e);
    m.hold("kernel_lse", b * H * blk.q_rows * 4);
    if (s.cpu) m.scratch(cpu_flash_forward_scratch(blk.q_rows, blk.kv_rows, d, e, s.cpu_threads));
    // out, logsumexp, *rest = op(...): the previous block's let go here
    m.alias("block_out", "kernel_out");
    m.alias("block_lse", "kernel_lse");
    m.drop("kernel_out");
    m.drop("kernel_lse");
    if (e != 4) m.hold("block_out32", b * H * blk.q_rows * d * 4);
    else m.alias("block_out32", "block_out");
    merge(m, s, blk.q_rows, blk.partial, first);
    first = false;
    m.drop("block_out32");
  }
  // results(): the running output cast back to e (fp32: itself), the lse a view.
  if (e != 4) m.hold("out", b * H * Sl * d * e);
  else m.alias("out", "merged_out");
  m.alias("lse", "merged_lse");
  m.drop_all_but({"out", "lse"});
  return {m.peak(), m.live()};
}

namespace {

// One block's kernel in backward: dq, dk, dv over its rows (e) and its scratch, then the
// block's gradients as grad_query_, grad_key_, grad_value_.
void backward_kernel(Replay& m, const RingShape& s, const StepBlock& blk) {
  const std::int64_t b = s.b, H = s.q_heads, K = s.kv_heads, d = s.head_dim, e = s.elem;
  m.alias("k", "key");
  m.alias("v", "value");
  // The second half's lse: logsumexp.chunk(2)[1].contiguous() copies unless b*H == 1.
  if (blk.partial && b * H > 1) m.hold("lse_half", b * H * blk.q_rows * 4);
  else m.drop("lse_half");
  // The kernel: dq, dk, dv zeros over its rows (e); the CPU kernel's grad_out.contiguous()
  // in [b, rows, H, d] where it is not laid out so (a half of it never is with b > 1), its
  // per-thread buffers (and for bf16 their copies in e) and row sums.
  m.hold("kernel_dq", b * H * blk.q_rows * d * e);
  m.hold("kernel_dk", b * K * blk.kv_rows * d * e);
  m.hold("kernel_dv", b * K * blk.kv_rows * d * e);
  if (s.cpu) {
    const bool dout_copied = !(s.grad_out_bshd || H == 1) || (blk.partial && b > 1);
    if (dout_copied) m.hold("grad_out_contig", b * H * blk.q_rows * d * e);
    m.scratch(cpu_flash_backward_scratch(blk.q_rows, blk.kv_rows, e, s.cpu_threads));
    m.drop("grad_out_contig");
  } else {
    // PyTorch's copy of FlashAttention-2's mha_bwd: softmax_d and dq_accum; under GQA dk and
    // dv over the query heads, summed into the kv heads' on return.
    m.hold("softmax_d", flash::fa2_softmax_d_bytes(b, blk.q_rows, H));
    m.hold("dq_accum", flash::fa2_dq_accum_bytes(b, blk.q_rows, H, d));
    if (H != K) {
      m.hold("dk_expanded", b * H * blk.kv_rows * d * e);
      m.hold("dv_expanded", b * H * blk.kv_rows * d * e);
      m.drop("dk_expanded");
      m.drop("dv_expanded");
    }
    m.drop("dq_accum");
    m.drop("softmax_d");
  }
  m.alias("grad_query_", "kernel_dq");
  m.alias("grad_key_", "kernel_dk");
  m.alias("grad_value_", "kernel_dv");
  m.drop("kernel_dq");
  m.drop("kernel_dk");
  m.drop("kernel_dv");
}

// Step i's gradients summed into the running dq and the dk/dv pair from the previous rank,
// and that pair sent on. `cast`: the CPU casts a bf16 addend to fp32 beside an fp32 sum.
void accumulate_gradients(Replay& m, const RingShape& s, int i, const StepBlock& blk, bool cast) {
  const std::int64_t b = s.b, H = s.q_heads, K = s.kv_heads, Sl = s.local_seq, d = s.head_dim;
  const std::int64_t q32 = b * H * Sl * d * 4, kv32 = b * K * Sl * d * 4;
  const std::int64_t kv_block_bytes = b * K * blk.kv_rows * d * 4;
  if (i == 0) {
    if (cast) {
      m.scratch(kv_block_bytes);
      m.scratch(kv_block_bytes);
    }
  } else {
    // The dk/dv pair from the previous rank; grad_key, grad_value its views.
    m.alias("next_grad_kv", "dkv_rotater");
    m.alias("grad_key", "next_grad_kv");
    m.alias("grad_value", "next_grad_kv");
    if (i <= s.rank && s.load_balance) {
      // _partial_update(add=True): the first half summed in place, then torch.cat.
      if (cast) m.scratch(kv_block_bytes);
      m.hold("grad_key", kv32);
      if (cast) m.scratch(kv_block_bytes);
      m.hold("grad_value", kv32);
    } else if (cast) {
      m.scratch(kv_block_bytes);
      m.scratch(kv_block_bytes);
    }
  }
  // cat(dk, dv) sent on by all-to-all, one received.
  m.hold("next_grad_kv", 2 * kv32);
  m.hold("dkv_rotater", 2 * kv32);
  if (cast) m.scratch(b * H * blk.q_rows * d * 4);
  if (!(i <= s.rank || !s.load_balance)) m.hold("grad_query", q32);  // _partial_update's cat
}

}  // namespace

RingMemory backward_memory(const RingShape& s) {
  Replay m;
  const std::int64_t b = s.b, H = s.q_heads, K = s.kv_heads, Sl = s.local_seq, d = s.head_dim, e = s.elem;
  const std::int64_t q32 = b * H * Sl * d * 4, kv32 = b * K * Sl * d * 4, kv = b * K * Sl * d * e;
  m.hold("grad_query", q32);
  m.hold("grad_key", kv32);
  m.hold("grad_value", kv32);
  if (s.qkv_transposed && K > 1) {
    m.hold("key", kv);
    m.hold("value", kv);
  }
  for (const int i : steps_of(s)) {
    if (i > 0) {
      m.alias("buffer", "kv_rotater");
      m.alias("key", "buffer");
      m.alias("value", "buffer");
    }
    if (i != s.world - 1) exchange_kv(m, s, 2 * kv);  // next_kv keeps the cat until reassigned
    const bool skip = skipped(s, i);
    const StepBlock blk = skip ? StepBlock{Sl, Sl, false} : block_of(s, i);
    if (!skip) {
      backward_kernel(m, s, blk);
    } else {
      m.hold("grad_query_", q32);
      m.hold("grad_key_", kv32);
      m.hold("grad_value_", kv32);
    }
    accumulate_gradients(m, s, i, blk, /*cast=*/s.cpu && e != 4 && !skip);
  }
  // dq back in e; the pair that came home (in e).
  if (e != 4) m.hold("grad_query", b * H * Sl * d * e);
  if (e != 4) m.hold("next_grad_kv", 2 * kv);
  else m.alias("next_grad_kv", "dkv_rotater");
  m.alias("grad_key", "next_grad_kv");
  m.alias("grad_value", "next_grad_kv");
  m.drop_all_but({"grad_query", "grad_key", "grad_value"});
  return {m.peak(), m.live()};
}

}  // namespace longctx::footprint::torch_ring
