#pragma once
// A training stack as one object: whose code runs the step (core/stack.h names them), what
// that code can express, and how its step is written. Every question the rest of longctx asks
// about a stack goes to its profile; adding a stack is a folder under planner/stacks/ with its
// profile, and one line in registry.cpp (and its StackKind enumerator).
//
// What a stack can express, from the coarsest to the finest: the techniques the search may
// use (`techniques`), the settings it takes and their defaults (`options`, `defaults`), the
// hardware it needs (`cuda_only`), the knobs it decides itself (`conform`, `tile_count`,
// `ring_exchange`, `kept_grads`), the knob values only it runs (`own_values`), and the rest
// of its rules (`validate`), each refusal naming the flag and the stack.
//
// Invariant: stack_profile(k).kind == k and .defaults.kind == k for every StackKind.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/core/knobs.h"
#include "planner/core/settings.h"
#include "planner/core/stack.h"
#include "planner/core/step_inputs.h"
#include "planner/graph/step_graph.h"
#include "planner/stacks/exporter.h"

namespace longctx::footprint::nccl {
struct Communicator;
}  // namespace longctx::footprint::nccl

namespace longctx {

// The dtype a stack keeps its gradients in, and why (" (FSDP2's sharded gradients)").
struct KeptGrads {
  DType dtype;
  const char* why;
};

struct StackProfile {
  StackKind kind;
  const char* name;     // the --stack word
  const char* summary;  // in --stack's help: "transformers' modeling code with torch AdamW, one GPU"
  StackSpec defaults;   // its options' defaults, kind included
  std::vector<SettingId> options = {};  // the stack options it takes (SettingRule::option); the others keep `defaults`
  // Knob values only some stacks run (KnobRule::stack_values) that this one runs.
  std::vector<std::pair<KnobId, KnobValue>> own_values = {};
  const char* cuda_only = nullptr;  // why it runs on CUDA GPUs only ("runs DeepSpeed and ..."), or nullptr
  bool runtime_runs_it = false;     // longctx's runtime executes its plans (`longctx run`)
  // Whether it pads each sample to the sequence layout's multiple (parallel_config.h,
  // padded_seq); one that does not takes only lengths that cut evenly.
  bool pads_sequence = true;
  std::optional<RingExchange> ring_exchange = {};  // the one exchange its ring runs, if it has one
  // What `longctx compare` adds when a profiler's trace (not longctx's) is held to a plan of
  // this stack, or nullptr: a trace from another stack's run predicts differently.
  const char* profiler_trace_note = nullptr;

  // The techniques the search may use on this stack for the base plan's settings and hardware.
  TechniqueSet (*techniques)(const Plan& base);
  // The gradients' dtype it keeps, if it decides it: --grad-dtype's default, and the only one it takes.
  std::optional<KeptGrads> (*kept_grads)(const Plan& p) = nullptr;
  // Sets the knobs it decides itself (stack_tiles.h, conform_to_stack), beside ring_exchange.
  void (*conform)(const ModelConfig& m, const Cluster& c, const TrainConfig& t, ParallelConfig& p) = nullptr;
  // The tile count it runs when the MLP (loss false) or the loss is tiled at all; nullptr or
  // nothing: any count may be chosen. REQUIRES: stack_tiles_defined(m, t, ulysses).
  std::optional<std::int64_t> (*tile_count)(const ModelConfig& m, const TrainConfig& t, int ulysses, bool loss) = nullptr;
  bool (*always_tiles_loss)(const StackSpec& s) = nullptr;  // its loss is tiled whatever the plan asks
  // Its rules beyond the tables' and its profile's data. REQUIRES: the generic rules hold.
  Result<bool> (*validate)(const Plan& p) = nullptr;
  // "hf (sdpa attention, ...)": its options for plan descriptions.
  std::string (*describe)(const StackSpec& s);
  // One rank's step graph, written by the stack's builder (planner/stacks/<name>/).
  // REQUIRES: validate() holds for the inputs.
  StepGraph (*build_step)(const StepInputs& in);
  // Where its MLP tile count changes only the sizes of its tiled MLP's workspaces (and its
  // launches): `graph`, built for `in` but at another count, made the graph build_step writes
  // for `in`, and true (max-context retries counts so; tests/unit/properties_test.cpp,
  // Properties.ARetiledStepIsTheStepBuiltAtItsCount, holds it to build_step); false, `graph`
  // untouched, where it cannot (`in` or `graph` does not tile the MLP).
  // nullptr: the stack cannot. REQUIRES: `graph` is build_step of `in` at another mlp_tiles > 1.
  bool (*retile_mlp)(StepGraph& graph, const StepInputs& in) = nullptr;
  // Its `longctx export --stack` word, writer and refusals (planner/stacks/<name>/export.h;
  // longctx's own plans export as a bare DeepSpeed config).
  const StackExporter* exporter;
  // The NCCL communicators its step makes on 2 ranks or more (footprint/communication.h),
  // whose buffers live outside the caching allocator. REQUIRES: p's world is 2 or more.
  std::vector<footprint::nccl::Communicator> (*communicators)(const Plan& p) = nullptr;
};

// The profile of stack k. REQUIRES: k is a StackKind enumerator.
const StackProfile& stack_profile(StackKind k);
// Every stack, longctx's own runtime (the default) first.
const std::vector<const StackProfile*>& stack_profiles();

// The techniques p's stack can run on p's hardware.
TechniqueSet stack_techniques(const Plan& p);
// Whether p's stack takes the option `id`.
bool takes_option(const StackProfile& s, SettingId id);
// "--stack hf or --stack arctic": the stacks that take option `id`.
std::string stacks_taking(SettingId id);

}  // namespace longctx
