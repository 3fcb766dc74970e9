#pragma once
// One training step as a graph of ops over named tensors, in execution order.
//
// Invariants (checked by StepGraph::check): every tensor read by an op is produced by an
// earlier op or exists before the step (producer == -1); the op dependency graph is acyclic
// and the schedule is one of its topological orders. A tensor is live from the start of its
// producer until the end of its last reader; persistent tensors (params, optimizer states)
// live across the whole step.
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace longctx {

// What a tensor is for; `Workspace` is an op's scratch, which lives only inside the op.
enum class Category { Params, Grads, Optimizer, Activations, Transient, Workspace };
inline constexpr int kCategories = 6;
const char* to_string(Category c);

enum class Place { Device, Host };
enum class Phase { Forward, Loss, Backward, Optimizer };
const char* to_string(Phase p);

// A name in parts, formatted only when shown: the search builds thousands of graphs and
// never reads a name. scope >= 0 is a layer ("layer.3."), kEmbed and kHead the other
// parameter groups ("embed.", "head."), kNone a bare name.
struct Name {
  static constexpr int kNone = -1, kEmbed = -2, kHead = -3;
  int scope = kNone;
  const char* base = "";
  bool recompute = false;  // ".recompute" suffix
};
std::string format(const Name& n);

// Up to kCapacity tensor indices, stored inline (no allocation per op). The widest op: the
// last of a streamed layer's forward, which reads its own inputs and the layer's device
// copies, one per parameter (up to 18).
class Ids {
 public:
  static constexpr int kCapacity = 24;

  Ids() = default;
  // Inline: every op of the thousands of graphs a search builds makes two.
  Ids(std::initializer_list<int> ids) {
    if (ids.size() > static_cast<std::size_t>(kCapacity)) too_many();
    for (int i : ids) ids_[size_++] = i;
  }
  void push_back(int id) {
    if (size_ == kCapacity) too_many();
    ids_[size_++] = id;
  }
  const int* begin() const { return ids_; }
  const int* end() const { return ids_ + size_; }
  int size() const { return size_; }

 private:
  [[noreturn]] static void too_many();

  // Left unset past size_: never read there, and zeroing them was a tenth of building an op.
  int ids_[kCapacity];
  int size_ = 0;
};

// What bounds an op's speed, for the cost model.
enum class OpKind { Matmul, Attention, Memory, Comm, Optimizer };

struct TensorSpec {
  Name name;                 // where it lives: "layer.7.attn.q", "loss.logits"
  std::int64_t bytes = 0;    // per rank, as requested (before allocator rounding)
  Category category = Category::Transient;
  Place place = Place::Device;
  int producer = -1;         // op index; -1: exists before the step
  int last_reader = -1;      // op index; -1 with producer -1: persistent; else set by finalize()
  bool persistent = false;   // lives across steps (params, optimizer states, param shards)
  // Of a tensor that exists before the step (producer -1): the op at which the first step of
  // a run allocates it, just after that op's first output, where it is not made before the
  // step (a thread's cuBLAS workspace, at its first matmul). -1: before the first step. Only
  // the reserved replay reads it (where a block lands shapes the cache); every predicted
  // phase is a later step's, which finds it allocated.
  int first_step_op = -1;
};

// Collectives and copies an op performs, for the cost model. SendRecv: a ring's hops, each
// rank sending to the next and receiving from the previous (its comm_group: the consecutive
// ranks the ring spans, which says whether it stays inside a node).
enum class CommKind { None, AllToAll, AllGather, ReduceScatter, AllReduce, HostToDevice, DeviceToHost, SendRecv };

struct OpSpec {
  Name name;
  Phase phase = Phase::Forward;
  int layer = -1;                      // -1 outside the layers (embedding, loss, optimizer)
  OpKind kind = OpKind::Memory;
  // Kernel launches (tiles, stages); of an op that exchanges, the collectives or hops it issues,
  // as the runtime issues them (one all-reduce per parameter tensor, one all-to-all each for
  // q, k and v): each pays a collective's latency.
  int launches = 1;
  Ids inputs;                          // tensor indices read
  Ids outputs;                         // tensor indices produced
  std::int64_t workspace_bytes = 0;    // device scratch live only inside the op
  // The scratch as the op's kernels ask the caching allocator for it, where that is several
  // blocks (a tile's buffers, one after another): a positive entry requests a block of that
  // many bytes, an entry -k returns the k-th block requested (from 1), and a 0 is where the
  // op's outputs are requested (without one, before the sequence); blocks still held at the
  // end return then. Empty: one block of workspace_bytes, after the outputs. The blocks held
  // together never exceed workspace_bytes, and reach it (footprint tests hold each sequence
  // to its peak).
  // Only the reserved replay reads it (reserved_replay.h): which blocks a cached segment can
  // serve depends on their sizes and order, not only on their peak.
  std::vector<std::int64_t> workspace_sequence = {};
  std::int64_t host_workspace_bytes = 0;
  double flops = 0;                    // per rank: the model's work, what MFU counts
  // What the kernel computes where it is more than `flops` (a causal flash kernel's whole
  // blocks across the diagonal, footprint::attention_kernel_flops); 0: `flops`. Timed.
  double kernel_flops = 0;
  double memory_bytes = 0;             // bytes over device memory, for ops bound by bandwidth
  // Elements through exp, sigmoid or log (SiLU, softmax): on a CPU their evaluation, not
  // their bytes, bounds the op (MeasuredRates::transcendental_elems_per_s).
  double transcendentals = 0;
  CommKind comm = CommKind::None;
  double comm_bytes = 0;               // bytes each rank sends (collectives) or copies
  // Of comm_bytes, those that travel while the op itself computes (a ring's next k/v block
  // beside the current one's attention): hidden as far as the op's compute lasts.
  double overlapped_comm_bytes = 0;
  int comm_group = 1;                  // ranks taking part in the collective
  // The exchange is started and the step goes on without waiting for it (a prefetched
  // gather, a copy on a side stream): it may hide behind the compute of its phase and layer.
  // Otherwise the rank waits for it, and only overlapped_comm_bytes hide.
  bool comm_async = false;
  // The CUDA stream it runs on: 0 the default one. The caching allocator keeps each stream's
  // freed blocks for that stream's requests (CUDACachingAllocator.cpp: a block's stream is
  // part of its pool key), so what an op on a side stream allocates (its outputs, its
  // workspace) is reserved apart from the default stream's (reserved_replay.h).
  int stream = 0;
  bool host_compute = false;           // runs on the CPU (offloaded optimizer)
  // Multiplies through cuBLAS (a matmul, or attention stages that project q, k and v): the
  // first such op of each thread allocates that thread's cuBLAS workspace (step_builder.cpp).
  bool calls_cublas = false;
};

class StepGraph {
 public:
  void reserve(std::size_t tensors, std::size_t ops) {
    tensors_.reserve(tensors);
    last_read_.reserve(tensors);
    ops_.reserve(ops);
  }
  int add_tensor(TensorSpec t);
  // Appends an op; its outputs get this op as producer. (Moved in: an op is a few hundred
  // bytes, and the search appends millions.)
  int add_op(OpSpec&& op);
  int add_op(const OpSpec& op) { return add_op(OpSpec(op)); }
  // One more tensor op `op` reads, known only after the op was appended.
  void add_input(int op, int tensor);
  // Sets each tensor's last reader from the ops; tensors never read die with their producer.
  void finalize();
  // The same of the ops so far, in a graph still being written (a prefix's: later readers are
  // missing, never extra); finalize() sets them again once it is whole.
  void note_last_readers();
  // The invariants above, with the first violation named.
  Result<bool> check() const;

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::vector<OpSpec>& ops() const { return ops_; }
  const TensorSpec& tensor(int i) const { return tensors_[static_cast<std::size_t>(i)]; }
  TensorSpec& tensor(int i) { return tensors_[static_cast<std::size_t>(i)]; }
  const OpSpec& op(int i) const { return ops_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<TensorSpec> tensors_;
  std::vector<OpSpec> ops_;
  std::vector<int> last_read_;  // tensor -> the latest op read it so far, -1: none
};

// The phase an op runs in, under the names the runtime measures (phase_names.h).
std::string phase_of(const OpSpec& op);

}  // namespace longctx
