#include "planner/graph/allocator_events.h"

#include <algorithm>

namespace longctx {

// Writes the events of append_allocator_events, a step at a time. An op's tensors to allocate
// at its start (its outputs it produces) and to free at its end (those it reads last, or makes
// and nobody reads: StepGraph::finalize) are found from the op's own lists as it is written,
// so a replay that stops early never reads the rest of the graph's tensors.
class AllocatorEventWriter::Impl {
 public:
  explicit Impl(const StepGraph& graph)
      : tensors_(graph.tensors()), ops_(graph.ops()), block_of_(tensors_.size(), -1), stream_of_(tensors_.size(), 0),
        next_block_(static_cast<int>(tensors_.size())) {
    // The tensors that exist before the step: made before it, or by the first step at an op.
    for (int i = 0; i < static_cast<int>(tensors_.size()); ++i) {
      const TensorSpec& t = tensors_[static_cast<std::size_t>(i)];
      if (t.producer >= 0 || !on_device(t)) continue;
      if (t.first_step_op >= 0) first_step_born_.emplace_back(t.first_step_op, i);
      else before_step_.push_back(i);
    }
    std::sort(first_step_born_.begin(), first_step_born_.end());  // by op, then by index
  }

  void write(std::vector<AllocatorEvent>& out, int end_op) {
    out_ = &out;
    const int ops = static_cast<int>(ops_.size());
    if (next_op_ < 0) {
      for (int i : before_step_) allocate(i, 0, -1, step_);
      next_op_ = 0;
    }
    for (const int end = std::min(end_op, ops); next_op_ < end; ++next_op_) op_events(next_op_, step_);
    if (next_op_ == ops) {
      ++step_;
      next_op_ = -1;
    }
    out_ = nullptr;
  }
  int steps_written() const { return step_; }

 private:
  bool on_device(const TensorSpec& t) const { return t.place == Place::Device && t.bytes > 0; }

  // Op k's device tensors it makes (`born_`) and those it frees at its end (`dying_`), each by
  // index, and its share of first_step_born_. Ops are written in order within a step.
  void list_op_tensors(int k) {
    const OpSpec& op = ops_[static_cast<std::size_t>(k)];
    born_.clear();
    dying_.clear();
    for (const int i : op.outputs) {
      const TensorSpec& t = tensors_[static_cast<std::size_t>(i)];
      if (!on_device(t)) continue;
      if (t.producer == k) born_.push_back(i);
      if (!t.persistent && t.last_reader == k) dying_.push_back(i);  // made and never read
    }
    for (const int i : op.inputs) {
      const TensorSpec& t = tensors_[static_cast<std::size_t>(i)];
      if (!t.persistent && t.last_reader == k && on_device(t)) dying_.push_back(i);
    }
    sorted_once(born_);
    sorted_once(dying_);
    if (k == 0) first_step_from_ = 0;
    while (first_step_from_ < first_step_born_.size() && first_step_born_[first_step_from_].first < k) ++first_step_from_;
    first_step_to_ = first_step_from_;
    while (first_step_to_ < first_step_born_.size() && first_step_born_[first_step_to_].first == k) ++first_step_to_;
  }

  // Ascending, each index once (an op's lists are a few ids: an insertion sort).
  static void sorted_once(std::vector<int>& ids) {
    if (ids.size() < 2) return;
    for (std::size_t a = 1; a < ids.size(); ++a)
      for (std::size_t b = a; b > 0 && ids[b - 1] > ids[b]; --b) std::swap(ids[b - 1], ids[b]);
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }

  void allocate(int i, int stream, int op, int step) {
    const auto ii = static_cast<std::size_t>(i);
    if (block_of_[ii] >= 0) return;  // a persistent tensor born in the first step stays
    block_of_[ii] = i;
    stream_of_[ii] = stream;
    out_->push_back(AllocatorEvent{true, i, tensors_[ii].bytes, stream, op, step});
  }

  void allocate_first_step_born(int stream, int k, int step) {
    for (std::size_t f = first_step_from_; f < first_step_to_; ++f) allocate(first_step_born_[f].second, stream, k, step);
  }

  // The op's outputs, with what the first step makes just after the first of them.
  void allocate_outputs(int k, int stream, int step) {
    bool first = true;
    for (const int i : born_) {
      allocate(i, stream, k, step);
      if (first) allocate_first_step_born(stream, k, step);
      first = false;
    }
    if (born_.empty()) allocate_first_step_born(stream, k, step);
  }

  // The workspace as its sequence of blocks: block b of the sequence is first + b, each
  // returned once.
  void workspace_sequence(int k, int stream, int step) {
    const auto& sequence = ops_[static_cast<std::size_t>(k)].workspace_sequence;
    const int first = next_block_;
    held_.clear();
    for (const std::int64_t entry : sequence) {
      if (entry == 0) {
        allocate_outputs(k, stream, step);
      } else if (entry > 0) {
        out_->push_back(AllocatorEvent{true, next_block_++, entry, stream, k, step});
        held_.push_back(entry);
      } else {
        const auto b = static_cast<std::size_t>(-entry - 1);
        out_->push_back(AllocatorEvent{false, first + static_cast<int>(b), held_[b], stream, k, step});
        held_[b] = 0;
      }
    }
    for (std::size_t b = 0; b < held_.size(); ++b)
      if (held_[b] > 0) out_->push_back(AllocatorEvent{false, first + static_cast<int>(b), held_[b], stream, k, step});
  }

  void op_events(int k, int step) {
    const OpSpec& op = ops_[static_cast<std::size_t>(k)];
    list_op_tensors(k);
    const auto& sequence = op.workspace_sequence;
    const bool outputs_inside = std::find(sequence.begin(), sequence.end(), 0) != sequence.end();
    if (!outputs_inside) allocate_outputs(k, op.stream, step);
    if (!sequence.empty()) {
      workspace_sequence(k, op.stream, step);
    } else if (op.workspace_bytes > 0) {
      const int scratch = next_block_++;
      out_->push_back(AllocatorEvent{true, scratch, op.workspace_bytes, op.stream, k, step});
      out_->push_back(AllocatorEvent{false, scratch, op.workspace_bytes, op.stream, k, step});
    }
    for (const int i : dying_) {
      const auto ii = static_cast<std::size_t>(i);
      out_->push_back(AllocatorEvent{false, i, tensors_[ii].bytes, stream_of_[ii], k, step});
      block_of_[ii] = -1;
    }
  }

  const std::vector<TensorSpec>& tensors_;
  const std::vector<OpSpec>& ops_;
  std::vector<AllocatorEvent>* out_ = nullptr;  // while a step is written
  int step_ = 0;      // the step being written; 2 once both are
  int next_op_ = -1;  // the next op to write; -1 before the step's start
  std::vector<int> before_step_;
  std::vector<std::pair<int, int>> first_step_born_;  // (first_step_op, tensor), sorted
  // The op being written's: list_op_tensors.
  std::vector<int> born_, dying_;
  std::size_t first_step_from_ = 0, first_step_to_ = 0;
  // A tensor's live block and the stream whose pool it came from; blocks past the tensors'
  // indices are workspaces.
  std::vector<int> block_of_, stream_of_;
  int next_block_;
  std::vector<std::int64_t> held_;  // the current workspace sequence's blocks, 0 once returned
};

AllocatorEventWriter::AllocatorEventWriter(const StepGraph& graph) : impl_(std::make_unique<Impl>(graph)) {}
AllocatorEventWriter::~AllocatorEventWriter() = default;
void AllocatorEventWriter::append(std::vector<AllocatorEvent>& out, int end_op) { impl_->write(out, end_op); }
int AllocatorEventWriter::steps_written() const { return impl_->steps_written(); }

void append_allocator_events(const StepGraph& graph, std::vector<AllocatorEvent>& out) {
  AllocatorEventWriter writer(graph);
  const int ops = static_cast<int>(graph.ops().size());
  writer.append(out, ops);
  writer.append(out, ops);
}

void for_each_allocator_event(const StepGraph& graph, const std::function<void(const AllocatorEvent&)>& visit) {
  for (const AllocatorEvent& e : step_allocator_events(graph)) visit(e);
}

std::vector<AllocatorEvent> step_allocator_events(const StepGraph& graph) {
  std::vector<AllocatorEvent> events;
  // Each step allocates and frees every tensor at most once and a workspace or two per op:
  // room for that up front, instead of the copies of a growing vector.
  events.reserve(4 * (graph.tensors().size() + graph.ops().size()));
  append_allocator_events(graph, events);
  return events;
}

}  // namespace longctx
