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

#include "longctx/planner/result.h"

namespace longctx {

enum class Category { Params, Grads, Optimizer, Activations, Transient, Comm, Workspace };
inline constexpr int kCategories = 7;
const char* to_string(Category c);

enum class Place { Device, Host };
enum class Phase { Forward, Loss, Backward, Optimizer };
const char* to_string(Phase p);

struct TensorSpec {
  std::string name;          // where it lives: "layer.7.attn.q", "loss.logits"
  std::int64_t bytes = 0;    // per rank, as requested (before allocator rounding)
  Category category = Category::Transient;
  Place place = Place::Device;
  int producer = -1;         // op index; -1: exists before the step
  int last_reader = -1;      // op index; -1 with producer -1: persistent; else set by finalize()
  bool persistent = false;   // lives across steps (params, optimizer states, param shards)
};

// Collectives and copies an op performs, for the cost model.
enum class CommKind { None, AllToAll, AllGather, ReduceScatter, AllReduce, HostToDevice, DeviceToHost };

struct OpSpec {
  std::string name;
  Phase phase = Phase::Forward;
  int layer = -1;                      // -1 outside the layers (embedding, loss, optimizer)
  std::vector<int> inputs;             // tensor indices read
  std::vector<int> outputs;            // tensor indices produced
  std::int64_t workspace_bytes = 0;    // device scratch live only inside the op
  std::int64_t host_workspace_bytes = 0;
  double flops = 0;                    // per rank
  double memory_bytes = 0;             // bytes over device memory, for ops bound by bandwidth
  CommKind comm = CommKind::None;
  double comm_bytes = 0;               // bytes each rank sends (collectives) or copies
  int comm_group = 1;                  // ranks taking part in the collective
  bool host_compute = false;           // runs on the CPU (offloaded optimizer)
};

class StepGraph {
 public:
  int add_tensor(TensorSpec t);
  // Appends an op; its outputs get this op as producer.
  int add_op(OpSpec op);
  // Sets each tensor's last reader from the ops; tensors never read die with their producer.
  void finalize();
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
};

}  // namespace longctx
