#include "planner/graph/step_graph.h"

#include "planner/core/phase_names.h"
#include "planner/graph/work_counts.h"

#include <algorithm>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <fmt/format.h>
#include <stdexcept>

namespace longctx {

const char* to_string(Category c) {
  switch (c) {
    case Category::Params: return "params";
    case Category::Grads: return "grads";
    case Category::Optimizer: return "optimizer";
    case Category::Activations: return "activations";
    case Category::Transient: return "transient";
    case Category::Workspace: return "workspace";
  }
  return "?";
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::Forward: return "forward";
    case Phase::Loss: return "loss";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
  }
  return "?";
}

std::string format(const Name& n) {
  std::string s;
  if (n.scope >= 0) s = fmt::format("layer.{}.", n.scope);
  else if (n.scope == Name::kEmbed) s = "embed.";
  else if (n.scope == Name::kHead) s = "head.";
  s += n.base;
  if (n.recompute) s += ".recompute";
  return s;
}

void Ids::too_many() { throw std::logic_error("an op with more tensors than Ids holds"); }

int StepGraph::add_tensor(TensorSpec t) {
  tensors_.push_back(std::move(t));
  last_read_.push_back(-1);
  return static_cast<int>(tensors_.size()) - 1;
}

int StepGraph::add_op(OpSpec&& op) {
  const int index = static_cast<int>(ops_.size());
  for (int t : op.outputs) tensors_[static_cast<std::size_t>(t)].producer = index;
  // Ops come in schedule order: the latest reader so far is this one.
  for (int t : op.inputs) last_read_[static_cast<std::size_t>(t)] = index;
  ops_.push_back(std::move(op));
  return index;
}

void StepGraph::add_input(int op, int tensor) {
  ops_[static_cast<std::size_t>(op)].inputs.push_back(tensor);
  int& last = last_read_[static_cast<std::size_t>(tensor)];
  last = std::max(last, op);
}

void StepGraph::finalize() {
  ++work_counts().graphs;  // once a graph: every builder finishes with it
  note_last_readers();
}

void StepGraph::note_last_readers() {
  // The readers were noted as the ops came (add_op, add_input): one pass over the tensors,
  // not a second over the ops.
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    TensorSpec& t = tensors_[i];
    if (!t.persistent) t.last_reader = std::max(t.producer, last_read_[i]);
  }
}

Result<bool> StepGraph::check() const {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph g(ops_.size());
  for (int i = 0; i < static_cast<int>(ops_.size()); ++i) {
    for (int t : ops_[static_cast<std::size_t>(i)].inputs) {
      const auto& ts = tensors_[static_cast<std::size_t>(t)];
      if (ts.producer >= i)
        return Error{ErrorKind::Internal, format(ops_[static_cast<std::size_t>(i)].name),
                     fmt::format("reads {} before it is produced", format(ts.name))};
      if (ts.producer >= 0) boost::add_edge(static_cast<std::size_t>(ts.producer), static_cast<std::size_t>(i), g);
    }
  }
  std::vector<std::size_t> order;
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    return Error{ErrorKind::Internal, "step graph", "has a cycle"};
  }
  for (const auto& t : tensors_)
    if (t.bytes < 0) return Error{ErrorKind::Internal, format(t.name), "has negative size"};
  return true;
}

std::string phase_of(const OpSpec& op) {
  switch (op.phase) {
    case Phase::Forward:
      return op.layer >= 0 ? phase_name(StepPhase::ForwardLayer, op.layer) : phase_name(StepPhase::ForwardEmbed);
    case Phase::Loss: return phase_name(StepPhase::Loss);
    case Phase::Backward:
      if (op.layer >= 0) return phase_name(StepPhase::BackwardLayer, op.layer);
      return phase_name(op.name.scope == Name::kEmbed ? StepPhase::BackwardEmbed : StepPhase::BackwardLoss);
    case Phase::Optimizer: return phase_name(StepPhase::Optimizer);
  }
  return "?";
}

}  // namespace longctx
