#pragma once
// Appends tensors and ops to a StepGraph: the one place the step's emitters touch the graph.
#include <cstdint>
#include <vector>

#include "planner/graph/step_graph.h"

namespace longctx::step {

// What an op costs beyond the tensors it reads and writes.
struct OpCost {
  std::int64_t workspace = 0;   // device scratch live only inside the op
  std::vector<std::int64_t> workspace_sequence = {};  // OpSpec::workspace_sequence
  double flops = 0;             // per rank; an op with flops, no kind, traffic or transcendentals is a matmul
  double kernel_flops = 0;      // OpSpec::kernel_flops
  OpKind kind = OpKind::Memory;
  int launches = 1;             // kernel launches or collective rounds
  int repeats = 1;              // tiles or stages: the workspace is written and read once each
  // Bytes the op's kernels move, counted from the runtime's code where it makes several
  // passes (footprint: *_traffic); 0: its activations read and written once (op() below).
  double traffic = 0;
  double transcendentals = 0;   // OpSpec::transcendentals
  bool projects = false;        // not a matmul, but it runs projections too (OpSpec::calls_cublas)
};

class GraphWriter {
 public:
  void reserve(std::size_t tensors, std::size_t ops) { graph_.reserve(tensors, ops); }

  // A tensor produced by the next op that lists it as an output.
  int tensor(Name name, std::int64_t bytes, Category category, Place place = Place::Device);
  // A tensor that lives across steps (parameters, optimizer states, tables built once).
  int persistent(Name name, std::int64_t bytes, Category category, Place place);

  // Appends an op. Its memory traffic is cost.traffic where given, else the activations it
  // reads and writes and its workspace written and read once per repeat; weights and
  // gradients are left out, so a tiled or staged op moves the same bytes as the plain ops it
  // replaces and differs in launches.
  int op(Name name, Phase phase, int layer, Ids inputs, Ids outputs, OpCost cost = {});
  // The first op of `phase` appended so far that calls cuBLAS, or -1.
  int first_cublas_op(Phase phase) const {
    for (int k = 0; k < static_cast<int>(graph_.ops().size()); ++k) {
      const OpSpec& o = graph_.ops()[static_cast<std::size_t>(k)];
      if (o.phase == phase && o.calls_cublas) return k;
    }
    return -1;
  }
  // TensorSpec::first_step_op of a tensor made before the step.
  void first_allocated_at(int tensor, int op) { graph_.tensor(tensor).first_step_op = op; }
  // Appends an op whose every field the caller has set (the optimizer step).
  int raw_op(OpSpec op) { return graph_.add_op(std::move(op)); }

  // Makes an op a collective or a copy: `bytes` sent (or copied) by each of `group` ranks.
  // An op with no flops is then bound by the exchange.
  // `overlapped` of the bytes travel while the op computes (OpSpec::overlapped_comm_bytes).
  void set_comm(int op, CommKind kind, double bytes, int group, double overlapped = 0);
  // The op's exchange runs while the step goes on (OpSpec::comm_async); `calls`: the
  // collectives or copies it issues (OpSpec::launches).
  void set_comm_async(int op, bool async = true);
  void set_calls(int op, int calls);
  // Runs an op on side stream `stream` (OpSpec::stream).
  void set_stream(int op, int stream);
  // One more tensor an op reads, known only after the op was written (a layer's gathered
  // parameters, a recomputed layer's root).
  void add_input(int op, int tensor);

  int last_op() const { return static_cast<int>(graph_.ops().size()) - 1; }
  std::int64_t bytes(int tensor) const { return graph_.tensor(tensor).bytes; }

  // The graph written so far, each tensor's last reader that of the ops so far.
  const StepGraph& with_last_readers() {
    graph_.note_last_readers();
    return graph_;
  }

  // Sets every tensor's last reader and hands the graph over.
  StepGraph finish() {
    graph_.finalize();
    return std::move(graph_);
  }

 private:
  OpSpec& mutable_op(int op);

  StepGraph graph_;
};

// Defined here so that they inline into the emitters: the search builds thousands of graphs.
inline int GraphWriter::tensor(Name name, std::int64_t bytes, Category category, Place place) {
  TensorSpec t;
  t.name = name;
  t.bytes = bytes;
  t.category = category;
  t.place = place;
  return graph_.add_tensor(std::move(t));
}

inline int GraphWriter::persistent(Name name, std::int64_t bytes, Category category, Place place) {
  const int t = tensor(name, bytes, category, place);
  graph_.tensor(t).persistent = true;
  return t;
}

inline int GraphWriter::op(Name name, Phase phase, int layer, Ids inputs, Ids outputs, OpCost cost) {
  OpSpec o;
  o.name = name;
  o.phase = phase;
  o.layer = layer;
  o.inputs = inputs;
  o.outputs = outputs;
  o.workspace_bytes = cost.workspace;
  o.workspace_sequence = std::move(cost.workspace_sequence);
  o.flops = cost.flops;
  o.kernel_flops = cost.kernel_flops;
  o.transcendentals = cost.transcendentals;
  // Flops alone make a matmul; flops beside counted traffic or transcendentals are an
  // elementwise kernel's (a norm, RoPE, SwiGLU, log-softmax), which calls no cuBLAS.
  const bool elementwise = cost.traffic > 0 || cost.transcendentals > 0;
  o.kind = cost.flops > 0 && !elementwise && cost.kind == OpKind::Memory ? OpKind::Matmul : cost.kind;
  o.calls_cublas = o.kind == OpKind::Matmul || cost.projects;
  o.launches = cost.launches;
  auto traffic = [&](int t) {
    const TensorSpec& ts = graph_.tensor(t);
    if (ts.category != Category::Params && ts.category != Category::Grads) o.memory_bytes += double(ts.bytes);
  };
  if (cost.traffic > 0) {
    o.memory_bytes = cost.traffic;
  } else {
    for (int t : o.inputs) traffic(t);
    for (int t : o.outputs) traffic(t);
    o.memory_bytes += 2.0 * double(cost.workspace) * cost.repeats;
  }
  return graph_.add_op(std::move(o));
}

// StepGraph hands out ops read-only once appended; only the writer amends the ones it wrote.
inline OpSpec& GraphWriter::mutable_op(int op) { return const_cast<OpSpec&>(graph_.op(op)); }

// An op of a finished graph, amended where it stays what a build writes (a stack's retile_mlp,
// profile.h): as the writer amends its ops, never their inputs or outputs, from which the graph
// noted producers and last readers.
inline OpSpec& amend_finished_op(StepGraph& graph, int op) { return const_cast<OpSpec&>(graph.op(op)); }

inline void GraphWriter::set_comm(int op, CommKind kind, double bytes, int group, double overlapped) {
  OpSpec& o = mutable_op(op);
  o.comm = kind;
  o.comm_bytes = bytes;
  o.overlapped_comm_bytes = overlapped;
  o.comm_group = group;
  if (o.flops == 0) o.kind = OpKind::Comm;
}

inline void GraphWriter::add_input(int op, int tensor) { graph_.add_input(op, tensor); }

inline void GraphWriter::set_stream(int op, int stream) { mutable_op(op).stream = stream; }

inline void GraphWriter::set_comm_async(int op, bool async) { mutable_op(op).comm_async = async; }

inline void GraphWriter::set_calls(int op, int calls) { mutable_op(op).launches = calls; }

// Names: a layer's ("layer.3.attn.q", with ".recompute" when rebuilt in backward), and one
// outside the layers ("loss.logits").
inline Name layer_name(int layer, const char* base, bool recompute = false) { return Name{layer, base, recompute}; }
inline Name step_name(const char* base, bool recompute = false) { return Name{Name::kNone, base, recompute}; }

}  // namespace longctx::step
