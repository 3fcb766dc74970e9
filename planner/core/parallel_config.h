#pragma once
// One point of the search space: how a training step is distributed and which memory
// techniques it uses. validate() is the one place that says what is allowed.
#include <cstdint>
#include <string>

#include "planner/core/model_config.h"
#include "common/result.h"
#include "planner/core/stack.h"

namespace longctx {

enum class Sharding { None, Zero1, Zero2, Zero3 };
std::string to_string(Sharding s);
Result<Sharding> parse_sharding(const std::string& text, const std::string& field);

// Activation checkpointing as a small type: which layers keep only their input.
//   Ops: every layer checkpointed, but the outputs of the ops on the stack's save list kept
//   from forward and handed to the recompute instead of being recomputed: torchtitan's
//   per-op selective checkpointing (`selective_ac_option = "op"`; the torchtitan stack only).
struct CheckpointPolicy {
  enum class Kind { None, Full, EveryK, Ops };
  Kind kind = Kind::None;
  int every = 1;  // EveryK: layers l with l % every == 0 are checkpointed (the torchtitan
                  // stack: (l + 1) % every == 0, as its selective mode picks them)

  static CheckpointPolicy none() { return {}; }
  static CheckpointPolicy full() { return {Kind::Full, 1}; }
  // every:1 is full: one canonical form, so a policy equals itself read back from a plan file.
  static CheckpointPolicy every_k(int k) { return k == 1 ? full() : CheckpointPolicy{Kind::EveryK, k}; }
  static CheckpointPolicy ops() { return {Kind::Ops, 1}; }
  bool checkpoints_layer(std::int64_t layer) const {
    return kind == Kind::Full || kind == Kind::Ops || (kind == Kind::EveryK && layer % every == 0);
  }
  bool any() const { return kind != Kind::None; }
  bool operator==(const CheckpointPolicy&) const = default;
};
std::string to_string(const CheckpointPolicy& c);  // "none", "full", "every:2", "op"
Result<CheckpointPolicy> parse_checkpoint(const std::string& text, const std::string& field);

// How the key/value blocks of ring attention reach the ring's ranks.
//   P2p:       pass-to-neighbour: each step sends the pair held to the next rank while the
//              current one is attended (ring-flash-attention, torch's context parallel
//              "alltoall" rotation); backward sends the pair again, the fp32 dk/dv
//              accumulators following it round the ring.
//   AllGather: every rank gathers the ring's whole k/v once (r pairs live), then attends its
//              blocks from the gathered buffer; backward gathers again and reduce-scatters
//              dk/dv accumulated for every holder (r accumulators live): Megatron-Core's and
//              TransformerEngine's all-gather context parallelism (cp_comm_type "all_gather").
//              Fewer, larger exchanges than the ring's r-1 hops, for r-fold k/v memory.
enum class RingExchange { P2p, AllGather };
std::string to_string(RingExchange e);  // "p2p", "allgather"
Result<RingExchange> parse_ring_exchange(const std::string& text, const std::string& field);

enum class DType { BF16, FP32 };
int bytes_of(DType t);
std::string to_string(DType t);
Result<DType> parse_dtype(const std::string& text, const std::string& field);

struct TrainConfig {
  std::int64_t seq = 0;          // tokens per sample (the whole sequence, before Ulysses splits it and pads it)
  std::int64_t micro_batch = 1;  // samples per data-parallel rank per step
  DType dtype = DType::BF16;     // parameters and activations as computed
  DType grad_dtype = DType::FP32;
  // fp32 master weights and AdamW moments always; with dtype FP32 the parameters are the master.
  // Under the hf stack neither: torch.optim's AdamW keeps its moments in the parameters' dtype.
  StackSpec stack;  // the code the step runs on (stack.h)
  MaxPositions max_positions = MaxPositions::Extend;  // positions past the model's max_position_embeddings
};

struct ParallelConfig {
  Sharding sharding = Sharding::None;
  int ulysses = 1;     // sequence-parallel degree u: each rank holds padded_seq/(u*ring) tokens
  int ring = 1;        // context-parallel (ring attention) degree r: r groups of u ranks share a sample
  RingExchange ring_exchange = RingExchange::P2p;  // with ring > 1: how k/v reach the ring's ranks
  int head_chunk = 0;  // 0: attention over all local heads at once; c >= 1: Untied Ulysses stages of c heads
  CheckpointPolicy checkpoint;
  bool offload_checkpoints = false;
  bool offload_optimizer = false;
  bool offload_params = false;
  int mlp_tiles = 1;   // 1: plain MLP; T > 1: tiled and recomputed per tile (tile_split: uneven)
  int loss_tiles = 1;  // 1: full logits; T > 1: tiled output projection + cross-entropy (tile_split)

  bool operator==(const ParallelConfig&) const = default;
};

struct Cluster {
  std::int64_t nodes = 1;
  std::int64_t gpus_per_node = 8;
  std::int64_t world() const { return nodes * gpus_per_node; }
};

// The sequence as the layout runs it: seq rounded up to a multiple of `multiple`, so every
// rank holds an equal share of each sample (as DeepSpeed's and ArcticTraining's Ulysses pad).
// The padding sits at the end of each sample; its labels are the ignore index, so it adds
// memory and time but nothing to the loss or the gradients (causal attention: no real token
// attends to it). The int overloads take the Ulysses degree as the multiple (no ring).
std::int64_t padded_seq(std::int64_t seq, std::int64_t multiple);
// Padding tokens per sample: padded_seq - seq.
std::int64_t padding_tokens(std::int64_t seq, std::int64_t multiple);
// Tokens each rank holds: micro_batch * padded_seq / u.
std::int64_t tokens_per_rank(const TrainConfig& t, std::int64_t ulysses);

// The ranks that share one sample: u * r. Ranks are numbered dp-major, then ring, then
// Ulysses: rank = (dp_index * r + ring_index) * u + ulysses_index, so a Ulysses group is u
// consecutive ranks (inside a node) and a ring links the groups.
std::int64_t sequence_ranks(const ParallelConfig& p);
// What a sample is padded to a multiple of: u without a ring; with one, 2*r*u, so the
// sequence cuts into 2r equal chunks (ring rank i holds chunks i and 2r-1-i: causal load
// balance) and each ring rank's two chunks into u equal Ulysses pieces.
std::int64_t sequence_multiple(const ParallelConfig& p);
std::int64_t padded_seq(std::int64_t seq, const ParallelConfig& p);
std::int64_t padding_tokens(std::int64_t seq, const ParallelConfig& p);
// Tokens each rank holds: micro_batch * padded_seq / (u * r).
std::int64_t tokens_per_rank(const TrainConfig& t, const ParallelConfig& p);

// `tiles` row tiles of n rows as torch.chunk cuts them (ArcticTraining's TiledMLP, Liger's
// chunked loss): `rows` = ceil(n / tiles) each, the last one shorter; `count` tiles run,
// which is `tiles` unless the rounding leaves the last ones empty (10 rows in 6 tiles: 5 of
// 2 rows). The footprint of a tile is the largest one's, `rows`.
// REQUIRES: 1 <= tiles <= n.
struct TileSplit {
  std::int64_t rows = 0, count = 0, last = 0;
};
TileSplit tile_split(std::int64_t n, std::int64_t tiles);

// Key/value heads each rank holds after the Ulysses all-to-all: K/u, or 1 replicated head
// when u exceeds K (u % K == 0).
std::int64_t kv_heads_per_rank(const ModelConfig& m, int ulysses);

// How an error names the input it refuses: the CLI's flag (`--sharding`; requests from the
// command line and from Python), or the plan file's field (`parallel.sharding`).
enum class FieldNames { Flags, PlanKeys };

struct Plan;
// Every rule a plan must satisfy, each failure naming the input and the rule: the one
// validation of command lines, plan files and Python requests. In order: the model, the
// cluster and the length; each row of the settings table (settings.h: values the hardware
// runs, options of the plan's stack only) and of the knob table (knobs.h: bounds,
// requirements, the row's own rule, values only some stacks run); the few rules that span
// rows; then the stack's own (its profile's: planner/stacks/profile.h). Implemented beside the
// stack registry (planner/stacks/validate.cpp), whose profiles it asks.
Result<bool> validate(const Plan& p, FieldNames names = FieldNames::Flags);
// The same for the parts of a plan, on a CUDA device of the default hardware.
Result<bool> validate(const ModelConfig& m, const Cluster& c, const TrainConfig& t, const ParallelConfig& p);

}  // namespace longctx
