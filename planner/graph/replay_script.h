#pragma once
// The reserved replay's script (reserved_replay.h): a step graph's allocator requests for two
// steps (allocator_events.h), the moments between them at which the replay notes the bytes
// reserved, each return naming the request whose block it returns, and the stretches that
// repeat (a layer making the requests the layer before it made), which the replay may skip
// where the allocator's state repeats too (replay_repeats.h).
#include <cstdint>
#include <memory>
#include <vector>

#include "planner/graph/resized_workspaces.h"
#include "planner/graph/step_graph.h"

namespace longctx {

// 24 bytes: a replay writes a few thousand of them for every plan it checks.
struct ScriptItem {
  enum class Kind : std::uint8_t { Allocate, Free, Note };
  Kind kind = Kind::Note;
  std::uint8_t step = 0;    // Note: the step (0 or 1) of the op noted
  std::int16_t stream = 0;  // a step's streams are a handful (OpSpec::stream)
  int op = -1;              // Note: the op whose reserved bytes are noted; -1 before the first
  int block = 0;            // Allocate, Free: the block (allocator_events.h)
  int request = -1;         // Free: the index of the Allocate item whose block it returns
  std::int64_t bytes = 0;   // Allocate: as requested
};

// Items [start, end) are each like the item `period` after it (alike()): items
// [start, end + period) repeat with that period.
struct Repeat {
  int start = 0, end = 0, period = 0;
};

struct ReplayScript {
  std::vector<ScriptItem> items;
  int blocks = 0;   // every block number is below it
  int streams = 1;  // every stream number is below it
  std::vector<Repeat> repeats;  // disjoint, in order
};

// Writes a graph's script a stretch of ops at a time, each stretch with the stretches of items
// that repeat within it. Most replays of the searches stop at a failed request in the first
// step, near its allocated peak, and never need what follows. The items are those
// replay_script writes, in the same order, however the ops are cut.
class ReplayScriptWriter {
 public:
  // REQUIRES: `graph` outlives the writer.
  explicit ReplayScriptWriter(const StepGraph& graph);
  ~ReplayScriptWriter();
  ReplayScriptWriter(const ReplayScriptWriter&) = delete;
  ReplayScriptWriter& operator=(const ReplayScriptWriter&) = delete;
  // Appends to `script` the items from where the writer stands up to op `end_op` of the
  // current step, exclusive (at or past its last op: the rest of the step), and the repeats
  // found within them; false when both steps are written already.
  bool append(ReplayScript& script, int end_op);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// One graph's script, written once for the replays of the graph and of the variants of it that
// resize its workspaces (resized_workspaces.h: the same step at other MLP tile counts), whose
// scripts are its items with the resized sizes asked: each replay reads what the replays before
// it had written and writes further only past that. The repeats found in the graph's items are
// repeats of a variant's too (alike() reads sizes only through their equality, which a function
// of the sizes keeps), if not every one its own script would find: a replay skips less at most.
class SharedScript {
 public:
  // REQUIRES: `graph` outlives it.
  explicit SharedScript(const StepGraph& graph) : writer_(graph) {}
  // Appends to `copy`, a replay's script holding the first copy.items.size() items read from
  // this one, every item written here since, resized by `resized`, with their repeats; where
  // there are none, first writes up to op `end_op` as ReplayScriptWriter::append does. False
  // when both steps are written and read.
  bool append(ReplayScript& copy, int end_op, const ResizedWorkspaces& resized);

 private:
  ReplayScriptWriter writer_;
  ReplayScript script_;
};

// Both steps' script.
ReplayScript replay_script(const StepGraph& graph);

// Whether items i and j ask the same of the allocator: the same kind on the same stream, the
// same bytes requested, or the return of a block requested as many items before. Every
// allocator decision depends on the items only through this.
bool alike(const ReplayScript& s, int i, int j);

}  // namespace longctx
