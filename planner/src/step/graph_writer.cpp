#include "graph_writer.h"

namespace longctx::step {

int GraphWriter::tensor(Name name, std::int64_t bytes, Category category, Place place) {
  TensorSpec t;
  t.name = name;
  t.bytes = bytes;
  t.category = category;
  t.place = place;
  return graph_.add_tensor(std::move(t));
}

int GraphWriter::persistent(Name name, std::int64_t bytes, Category category, Place place) {
  const int t = tensor(name, bytes, category, place);
  graph_.tensor(t).persistent = true;
  return t;
}

int GraphWriter::op(Name name, Phase phase, int layer, Ids inputs, Ids outputs, OpCost cost) {
  OpSpec o;
  o.name = name;
  o.phase = phase;
  o.layer = layer;
  o.inputs = inputs;
  o.outputs = outputs;
  o.workspace_bytes = cost.workspace;
  o.flops = cost.flops;
  o.kind = cost.flops > 0 && cost.kind == OpKind::Memory ? OpKind::Matmul : cost.kind;
  o.launches = cost.launches;
  auto traffic = [&](int t) {
    const TensorSpec& ts = graph_.tensor(t);
    if (ts.category != Category::Params && ts.category != Category::Grads) o.memory_bytes += double(ts.bytes);
  };
  for (int t : o.inputs) traffic(t);
  for (int t : o.outputs) traffic(t);
  o.memory_bytes += 2.0 * double(cost.workspace) * cost.repeats;
  return graph_.add_op(std::move(o));
}

// StepGraph hands out ops read-only once appended; only the writer amends the ones it wrote.
OpSpec& GraphWriter::mutable_op(int op) { return const_cast<OpSpec&>(graph_.op(op)); }

void GraphWriter::set_comm(int op, CommKind kind, double bytes, int group) {
  OpSpec& o = mutable_op(op);
  o.comm = kind;
  o.comm_bytes = bytes;
  o.comm_group = group;
  if (o.flops == 0) o.kind = OpKind::Comm;
}

void GraphWriter::add_input(int op, int tensor) { mutable_op(op).inputs.push_back(tensor); }

StepGraph GraphWriter::finish() {
  graph_.finalize();
  return std::move(graph_);
}

}  // namespace longctx::step
