#include "planner/graph/allocator_events.h"

#include <algorithm>

namespace longctx {
namespace {

// Tensor indices grouped by op, in index order within each op (one array and its offsets:
// the replay builds these for every graph it replays).
class ByOp {
 public:
  explicit ByOp(std::size_t ops) : start_(ops + 2, 0) {}
  // Two passes: count every (op, tensor), then place them in the same order.
  void count(int op) { ++start_[static_cast<std::size_t>(op) + 2]; }
  void allocate() {
    for (std::size_t k = 2; k < start_.size(); ++k) start_[k] += start_[k - 1];
    ids_.resize(static_cast<std::size_t>(start_.back()));
  }
  void place(int op, int id) { ids_[static_cast<std::size_t>(start_[static_cast<std::size_t>(op) + 1]++)] = id; }
  // After every place(): op k's ids.
  const int* begin(int op) const { return ids_.data() + start_[static_cast<std::size_t>(op)]; }
  const int* end(int op) const { return ids_.data() + start_[static_cast<std::size_t>(op) + 1]; }
  bool empty(int op) const { return begin(op) == end(op); }

 private:
  std::vector<int> start_, ids_;
};

}  // namespace

// Writes the events of append_allocator_events, a step at a time.
class AllocatorEventWriter::Impl {
 public:
  explicit Impl(const StepGraph& graph)
      : tensors_(graph.tensors()), ops_(graph.ops()), born_(ops_.size()), dying_(ops_.size()),
        first_step_born_(ops_.size()), block_of_(tensors_.size(), -1), stream_of_(tensors_.size(), 0),
        next_block_(static_cast<int>(tensors_.size())) {
    sort_tensors();
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

  // Each op's device tensors to allocate at its start and to free at its end, by index.
  // Tensors made before the step that the first step makes at an op instead (first_step_op).
  void sort_tensors() {
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < static_cast<int>(tensors_.size()); ++i) {
        const TensorSpec& t = tensors_[static_cast<std::size_t>(i)];
        if (!on_device(t)) continue;
        auto put = [&](ByOp& by, int op) { pass == 0 ? by.count(op) : by.place(op, i); };
        if (t.producer >= 0) put(born_, t.producer);
        else if (t.first_step_op >= 0) put(first_step_born_, t.first_step_op);
        else if (pass == 1) before_step_.push_back(i);
        if (!t.persistent && t.last_reader >= 0) put(dying_, t.last_reader);
      }
      if (pass == 0)
        for (ByOp* by : {&born_, &dying_, &first_step_born_}) by->allocate();
    }
  }

  void allocate(int i, int stream, int op, int step) {
    const auto ii = static_cast<std::size_t>(i);
    if (block_of_[ii] >= 0) return;  // a persistent tensor born in the first step stays
    block_of_[ii] = i;
    stream_of_[ii] = stream;
    out_->push_back(AllocatorEvent{true, i, tensors_[ii].bytes, stream, op, step});
  }

  // The op's outputs, with what the first step makes just after the first of them.
  void allocate_outputs(int k, int stream, int step) {
    bool first = true;
    for (const int* i = born_.begin(k); i != born_.end(k); ++i) {
      allocate(*i, stream, k, step);
      if (first)
        for (const int* f = first_step_born_.begin(k); f != first_step_born_.end(k); ++f) allocate(*f, stream, k, step);
      first = false;
    }
    if (born_.empty(k))
      for (const int* f = first_step_born_.begin(k); f != first_step_born_.end(k); ++f) allocate(*f, stream, k, step);
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
    for (const int* i = dying_.begin(k); i != dying_.end(k); ++i) {
      const auto ii = static_cast<std::size_t>(*i);
      out_->push_back(AllocatorEvent{false, *i, tensors_[ii].bytes, stream_of_[ii], k, step});
      block_of_[ii] = -1;
    }
  }

  const std::vector<TensorSpec>& tensors_;
  const std::vector<OpSpec>& ops_;
  std::vector<AllocatorEvent>* out_ = nullptr;  // while a step is written
  int step_ = 0;      // the step being written; 2 once both are
  int next_op_ = -1;  // the next op to write; -1 before the step's start
  ByOp born_, dying_, first_step_born_;
  std::vector<int> before_step_;
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
