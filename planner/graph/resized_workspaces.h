#pragma once
// Step graphs that ask the caching allocator for the same blocks in the same order but for the
// size of some ops' workspaces: what one plan is at several MLP tile counts (a tiled MLP is
// one op whose scratch is a tile's buffers). The looks at the cache a reserved replay of one of
// them keeps say which of the others would go request for request as it did
// (ReplayOptions::look_at_requests, variants_alike in reserved_replay.h), so that each need not
// be replayed.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "planner/graph/step_graph.h"

namespace longctx {

// How a variant resizes a graph's workspaces, as a function of their sizes: every single-block
// workspace of `from` bytes in the graph is one of `to` bytes in the variant, and no other
// request of the graph (a tensor, a workspace left as it is, a block of a workspace sequence)
// asks for `from` bytes. Sorted by `from`; empty: the same requests.
struct ResizedWorkspaces {
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes;  // (from, to)
  // The variant's size for a request of `bytes`, or nullopt where it asks the same.
  std::optional<std::int64_t> resized(std::int64_t bytes) const {
    for (const auto& [from, to] : sizes)
      if (from == bytes) return to;
    return std::nullopt;
  }
};

// A base graph and the graphs added to it that differ from it only in the sizes of single-block
// workspaces, each a function of the base's sizes; what they ask of the allocator otherwise
// (allocator_events.h: the same tensors, with the same bytes, places and lifetimes, and ops
// that make and free them alike on the same streams) is compared once per graph added, and how
// any member resizes another's workspaces is then read off their sizes alone.
class WorkspaceFamily {
 public:
  // REQUIRES: `base` outlives the family.
  explicit WorkspaceFamily(const StepGraph& base);
  // Adds `graph` where it is such a variant of the base: its member number (from 0); nullopt
  // otherwise, nothing added.
  std::optional<int> add(const StepGraph& graph);
  // The same for a graph known to be the base with some single-block workspaces resized and
  // nothing else changed (a stack's retile_mlp, profile.h), comparing only the ops' workspaces:
  // what add() answers for it. REQUIRES: `graph` is such a graph.
  std::optional<int> add_resized(const StepGraph& graph);
  // How member `to` resizes member `from`'s workspaces (kBase: the base graph); nullopt where
  // the sizes are no function of `from`'s, or a resized size is one `from` asks for otherwise.
  static constexpr int kBase = -1;
  std::optional<ResizedWorkspaces> resized(int from, int to) const;

 private:
  const std::vector<std::int64_t>& sizes_of(int member) const;
  // add()'s last part: the member `graph` is where its workspaces are a function of the base's.
  std::optional<int> add_sizes(const StepGraph& graph);

  const StepGraph& base_;
  std::vector<std::int64_t> base_sizes_;    // the base's single-block workspace sizes, sorted, each once
  std::vector<std::int64_t> other_sizes_;   // its other requests' sizes, sorted, each once
  std::vector<std::vector<std::int64_t>> members_;  // member -> its size for each of base_sizes_
};

}  // namespace longctx
