#include "planner/graph/resized_workspaces.h"

#include <algorithm>

namespace longctx {
namespace {

// What the allocator's requests read of a tensor (allocator_events.cpp).
bool same_requests(const TensorSpec& a, const TensorSpec& b) {
  return a.bytes == b.bytes && a.place == b.place && a.producer == b.producer && a.last_reader == b.last_reader &&
         a.persistent == b.persistent && a.first_step_op == b.first_step_op;
}

// (Loops, not std::equal: that calls memcmp, a call per list for lists of a few ids.)
bool same_ids(const Ids& a, const Ids& b) {
  if (a.size() != b.size()) return false;
  for (int i = 0; i < a.size(); ++i)
    if (a.begin()[i] != b.begin()[i]) return false;
  return true;
}

bool same_sequence(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

bool on_device(const TensorSpec& t) { return t.place == Place::Device && t.bytes > 0; }

bool single_block(const OpSpec& op) { return op.workspace_sequence.empty() && op.workspace_bytes > 0; }

void sorted_once(std::vector<std::int64_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

bool holds(const std::vector<std::int64_t>& sorted, std::int64_t x) { return std::binary_search(sorted.begin(), sorted.end(), x); }

}  // namespace

WorkspaceFamily::WorkspaceFamily(const StepGraph& base) : base_(base) {
  for (const TensorSpec& t : base.tensors())
    if (on_device(t)) other_sizes_.push_back(t.bytes);
  for (const OpSpec& op : base.ops()) {
    if (single_block(op)) base_sizes_.push_back(op.workspace_bytes);
    for (const std::int64_t entry : op.workspace_sequence)
      if (entry > 0) other_sizes_.push_back(entry);
  }
  sorted_once(base_sizes_);
  sorted_once(other_sizes_);
}

std::optional<int> WorkspaceFamily::add(const StepGraph& graph) {
  const auto &tensors = base_.tensors(), &graph_tensors = graph.tensors();
  const auto &ops = base_.ops(), &graph_ops = graph.ops();
  if (tensors.size() != graph_tensors.size() || ops.size() != graph_ops.size()) return std::nullopt;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!same_requests(tensors[i], graph_tensors[i])) return std::nullopt;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpSpec &a = ops[k], &b = graph_ops[k];
    if (a.stream != b.stream || !same_ids(a.inputs, b.inputs) || !same_ids(a.outputs, b.outputs) ||
        !same_sequence(a.workspace_sequence, b.workspace_sequence))
      return std::nullopt;
  }
  return add_sizes(graph);
}

std::optional<int> WorkspaceFamily::add_resized(const StepGraph& graph) { return add_sizes(graph); }

std::optional<int> WorkspaceFamily::add_sizes(const StepGraph& graph) {
  const auto &ops = base_.ops(), &graph_ops = graph.ops();
  constexpr std::int64_t kUnseen = -1;
  std::vector<std::int64_t> sizes(base_sizes_.size(), kUnseen);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpSpec &a = ops[k], &b = graph_ops[k];
    // A workspace that appears or goes away adds or drops a request.
    if ((a.workspace_bytes > 0) != (b.workspace_bytes > 0)) return std::nullopt;
    if (!single_block(a)) continue;
    const auto at = static_cast<std::size_t>(std::lower_bound(base_sizes_.begin(), base_sizes_.end(), a.workspace_bytes) -
                                             base_sizes_.begin());
    if (sizes[at] == kUnseen) sizes[at] = b.workspace_bytes;
    else if (sizes[at] != b.workspace_bytes) return std::nullopt;  // one base size, two sizes here
  }
  members_.push_back(std::move(sizes));
  return static_cast<int>(members_.size()) - 1;
}

const std::vector<std::int64_t>& WorkspaceFamily::sizes_of(int member) const {
  return member == kBase ? base_sizes_ : members_[static_cast<std::size_t>(member)];
}

std::optional<ResizedWorkspaces> WorkspaceFamily::resized(int from, int to) const {
  const std::vector<std::int64_t> &a = sizes_of(from), &b = sizes_of(to);
  // Every single-block workspace of `from`, by the base's size it stands for.
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes;
  for (std::size_t i = 0; i < a.size(); ++i) sizes.emplace_back(a[i], b[i]);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (std::size_t i = 1; i < sizes.size(); ++i)
    if (sizes[i].first == sizes[i - 1].first) return std::nullopt;  // one size, two resized sizes
  std::erase_if(sizes, [](const auto& s) { return s.first == s.second; });
  // Every member asks for the base's other requests (add() compared them).
  for (const auto& [size, _] : sizes)
    if (holds(other_sizes_, size)) return std::nullopt;
  return ResizedWorkspaces{std::move(sizes)};
}

}  // namespace longctx
