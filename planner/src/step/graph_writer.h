#pragma once
// Appends tensors and ops to a StepGraph: the one place the step's emitters touch the graph.
#include <cstdint>

#include "longctx/planner/step_graph.h"

namespace longctx::step {

// What an op costs beyond the tensors it reads and writes.
struct OpCost {
  std::int64_t workspace = 0;   // device scratch live only inside the op
  double flops = 0;             // per rank; an op with flops and no kind is a matmul
  OpKind kind = OpKind::Memory;
  int launches = 1;             // kernel launches or collective rounds
  int repeats = 1;              // tiles or stages: the workspace is written and read once each
};

class GraphWriter {
 public:
  void reserve(std::size_t tensors, std::size_t ops) { graph_.reserve(tensors, ops); }

  // A tensor produced by the next op that lists it as an output.
  int tensor(Name name, std::int64_t bytes, Category category, Place place = Place::Device);
  // A tensor that lives across steps (parameters, optimizer states, tables built once).
  int persistent(Name name, std::int64_t bytes, Category category, Place place);

  // Appends an op. Its memory traffic counts the activations it reads and writes and its
  // workspace written and read once per repeat; weights and gradients are left out, so a
  // tiled or staged op moves the same bytes as the plain ops it replaces and differs in
  // launches.
  int op(Name name, Phase phase, int layer, Ids inputs, Ids outputs, OpCost cost = {});
  // Appends an op whose every field the caller has set (the optimizer step).
  int raw_op(OpSpec op) { return graph_.add_op(std::move(op)); }

  // Makes an op a collective or a copy: `bytes` sent (or copied) by each of `group` ranks.
  // An op with no flops is then bound by the exchange.
  void set_comm(int op, CommKind kind, double bytes, int group);
  // One more tensor an op reads, known only after the op was written (a layer's gathered
  // parameters, a recomputed layer's root).
  void add_input(int op, int tensor);

  int last_op() const { return static_cast<int>(graph_.ops().size()) - 1; }
  std::int64_t bytes(int tensor) const { return graph_.tensor(tensor).bytes; }

  // Sets every tensor's last reader and hands the graph over.
  StepGraph finish();

 private:
  OpSpec& mutable_op(int op);

  StepGraph graph_;
};

// Names: a layer's ("layer.3.attn.q", with ".recompute" when rebuilt in backward), and one
// outside the layers ("loss.logits").
inline Name layer_name(int layer, const char* base, bool recompute = false) { return Name{layer, base, recompute}; }
inline Name step_name(const char* base, bool recompute = false) { return Name{Name::kNone, base, recompute}; }

}  // namespace longctx::step
