#pragma once
// The knob table: every knob of a plan the search may turn, one row each. Everything that
// lists the knobs is derived from it: the search's candidates and which of them a
// `--techniques` word allows (search.cpp), the `plan` flags and their --help text
// (cli/plan_command.cpp), the plan file's keys (plan_io.cpp), plan descriptions
// (cli/plan_output.cpp, `run`'s header), and the fixed knobs' checks.
//
// Adding a knob costs one row below, plus its footprint (a field of ParallelConfig or
// TrainConfig, its rule in validate(), its bytes in the step builder) and its runtime
// implementation.
#include <array>
#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/core/limits.h"
#include "planner/core/plan.h"
#include "common/result.h"

namespace longctx {

// The words of `--techniques`; each names what a row below allows beyond its plain value.
enum class Technique {
  Zero1, Zero2, Zero3, OffloadOptimizer, OffloadParams, Ulysses, Untied, Checkpoint,
  OffloadCheckpoints, TiledMlp, TiledLoss, Ring
};
inline constexpr int kTechniques = 12;
using TechniqueSet = std::bitset<kTechniques>;

// A knob's value as one integer, so the search can hold any knob's candidates alike: the
// number itself for counts, 0/1 for switches, the enumerator for Sharding, and for
// checkpointing 0 (none), 1 (full), K (every:K) or kCheckpointOps (op: above every K a model
// may have, so it too needs the `checkpoint` technique).
using KnobValue = std::int64_t;
inline constexpr KnobValue kCheckpointOps = limits::kMaxLayers + 1;

// How a row's candidates are found when the knob is not fixed. Listed: the row's `listed`
// values. Ulysses: every degree that divides the GPUs and passes the head rules. Ring: every
// ring degree r that, times the chosen Ulysses degree, divides the GPUs. HeadChunk:
// 0 and every valid chunk of the local heads, largest (fastest) first. Tiles: 1, the powers
// of two that leave tiles of the smallest length, and the count that makes the largest tile
// at most that length (tiles may be uneven: parallel_config.h, tile_split).
enum class Candidates { Listed, Ulysses, Ring, HeadChunk, Tiles };

// Which `--techniques` word a value needs. Plain values need none. `by_value` rows (sharding)
// need the word of that very value; the others need `technique` for every value above the
// plain one (an invalid value below it is left to validate()).
struct TechniqueUse {
  std::optional<Technique> technique = {};  // with its word, `word`
  const char* word = nullptr;
  std::array<std::optional<Technique>, 4> by_value = {};     // indexed by value; word: the value as text
};

// A row's dependency: values above the plain one need `knob` above its plain value (any) or
// at `value`; unfixed, `knob` is set to `value` by with_knobs().
enum class KnobId;
struct Requirement {
  KnobId knob;
  KnobValue value;
  bool exactly;  // true: needs `knob` == value; false: any value above plain
};

struct KnobRule {
  const char* label;                  // in plan descriptions: "<label> <value>", or the label alone for switches
  const char* help;                   // the --help text of its flag
  TechniqueUse technique;
  Candidates candidates = Candidates::Listed;
  std::vector<KnobValue> listed = {};  // Listed: in the order the search tries them
  std::optional<Requirement> needs = {};
  const char* plain_text = nullptr;   // description at the plain value, instead of "<label> <value>" ("": none)
  std::int64_t min = 0, max = 0;      // integer knobs: the bounds a plan file may hold (limits.h)
  bool fine = false;                  // searched inside each choice of the others, by search.h's bounds
  // Newer than plan files: written only away from its plain value, read as plain when absent,
  // so files (and their fingerprints) of plans without it stay as they were.
  bool optional_in_file = false;
};

// clang-format off
// ROW(field, C++ type, section, rule). `field` is the knob's name everywhere: the member of
// Knobs and of the plan's `section` (ParallelConfig or TrainConfig), the plan file's key
// "section.field", and the flag --field (underscores as dashes). Rows are in the search's
// order: each coarse row is enumerated inside the ones above it, then the fine rows.
#define LONGCTX_KNOB_TABLE(ROW)                                                                                     \
  ROW(sharding, Sharding, parallel, (KnobRule{                                                                     \
      .label = "sharding", .help = "none|zero1|zero2|zero3",                                                      \
      .technique = {.by_value = {{std::nullopt, Technique::Zero1, Technique::Zero2, Technique::Zero3}}},           \
      .listed = {0, 1, 2, 3}}))                                                                                    \
  ROW(ulysses, int, parallel, (KnobRule{                                                                           \
      .label = "ulysses", .help = "Sequence-parallel degree u (divides the GPUs and the query heads)",            \
      .technique = {Technique::Ulysses, "ulysses"}, .candidates = Candidates::Ulysses,                            \
      .min = 1, .max = limits::kMaxHeads}))                                                                        \
  ROW(ring, int, parallel, (KnobRule{                                                                              \
      .label = "ring", .help = "Ring-attention (context-parallel) degree r: u x r ranks share a sample",           \
      .technique = {Technique::Ring, "ring"}, .candidates = Candidates::Ring, .plain_text = "no ring",            \
      .min = 1, .max = limits::kMaxGpus, .optional_in_file = true}))                                               \
  ROW(ring_exchange, RingExchange, parallel, (KnobRule{                                                            \
      .label = "ring exchange", .help = "p2p|allgather: k/v passed round the ring, or gathered whole (--ring > 1)", \
      .technique = {Technique::Ring, "ring"}, .listed = {0, 1}, .needs = Requirement{KnobId::ring, 2, false},     \
      .plain_text = "", .optional_in_file = true}))                                                                \
  ROW(checkpoint, CheckpointPolicy, parallel, (KnobRule{                                                           \
      .label = "checkpoint", .help = "none|full|every:K|op (op: torchtitan's per-op selective, --stack torchtitan)",  \
      .technique = {Technique::Checkpoint, "checkpoint"}, .listed = {0, 2, 1, kCheckpointOps}}))                                   \
  ROW(offload_checkpoints, bool, parallel, (KnobRule{                                                              \
      .label = "checkpoints offloaded", .help = "Keep checkpointed layer inputs in host memory",                  \
      .technique = {Technique::OffloadCheckpoints, "offload-checkpoints"}, .listed = {0, 1},                      \
      .needs = Requirement{KnobId::checkpoint, 1, false}}))                                                              \
  ROW(offload_optimizer, bool, parallel, (KnobRule{                                                                \
      .label = "optimizer offloaded", .help = "fp32 master weights and moments in host memory, step on the CPU",  \
      .technique = {Technique::OffloadOptimizer, "offload-optimizer"}, .listed = {0, 1}}))                         \
  ROW(offload_params, bool, parallel, (KnobRule{                                                                   \
      .label = "params offloaded", .help = "zero3 parameter shards in host memory",                               \
      .technique = {Technique::OffloadParams, "offload-params"}, .listed = {0, 1},                                \
      .needs = Requirement{KnobId::sharding, 3, true}}))                                                                 \
  ROW(micro_batch, std::int64_t, train, (KnobRule{                                                                 \
      .label = "micro-batch", .help = "Samples per data-parallel rank", .technique = {}, .listed = {1, 2, 4},     \
      .min = 1, .max = limits::kMaxMicroBatch}))                                                                   \
  ROW(head_chunk, int, parallel, (KnobRule{                                                                        \
      .label = "untied head chunk", .help = "Untied Ulysses: query heads per stage per rank (0: off)",            \
      .technique = {Technique::Untied, "untied"}, .candidates = Candidates::HeadChunk,                            \
      .plain_text = "heads unchunked", .min = 0, .max = limits::kMaxHeads, .fine = true}))                        \
  ROW(mlp_tiles, int, parallel, (KnobRule{                                                                         \
      .label = "mlp tiles", .help = "Tiles of the MLP over the local sequence (1: untiled)",                      \
      .technique = {Technique::TiledMlp, "tiled-mlp"}, .candidates = Candidates::Tiles,                           \
      .min = 1, .max = limits::kMaxTiles, .fine = true}))                                                          \
  ROW(loss_tiles, int, parallel, (KnobRule{                                                                        \
      .label = "loss tiles", .help = "Tiles of the output projection + loss (1: full logits)",                    \
      .technique = {Technique::TiledLoss, "tiled-loss"}, .candidates = Candidates::Tiles,                         \
      .min = 1, .max = limits::kMaxTiles, .fine = true}))
// clang-format on

enum class KnobId {
#define LONGCTX_KNOB_ID(field, Type, section, rule) field,
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_ID)
#undef LONGCTX_KNOB_ID
};
#define LONGCTX_KNOB_COUNT(field, Type, section, rule) +1
inline constexpr std::size_t kKnobCount = 0 LONGCTX_KNOB_TABLE(LONGCTX_KNOB_COUNT);
#undef LONGCTX_KNOB_COUNT

// Knobs the user fixed; the others are searched.
struct Knobs {
#define LONGCTX_KNOB_MEMBER(field, Type, section, rule) std::optional<Type> field;
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_MEMBER)
#undef LONGCTX_KNOB_MEMBER
};

enum class KnobKind { Int, Switch, Text };  // how a value is written: a number, true/false, a word

// One row as the rest of longctx reads it.
struct Knob {
  KnobId id;
  const char* name;       // "head_chunk"
  std::string flag;       // "--head-chunk"
  const char* section;    // "parallel" or "train": the plan file's object, key `name`
  KnobKind kind;
  KnobRule rule;
  KnobValue plain;        // its value in a default Plan: what an unfixed knob is when not searched
};

// Every row, in table order.
const std::vector<Knob>& knob_table();
const Knob& knob(KnobId id);

KnobValue knob_value(const Plan& p, KnobId id);
void set_knob(Plan& p, KnobId id, KnobValue v);
std::optional<KnobValue> fixed_value(const Knobs& k, KnobId id);
void fix(Knobs& k, KnobId id, KnobValue v);

// A value as the plan file and descriptions write it ("zero3", "every:2", "4", "true"), and
// back. parse_knob's errors name `field`.
std::string format_knob(KnobId id, KnobValue v);
Result<KnobValue> parse_knob(KnobId id, const std::string& text, const std::string& field);

std::string to_string(Technique t);  // its --techniques word
std::vector<std::string> technique_names(const TechniqueSet& s);
// "all", "none", or a comma list of the words ("zero3,ulysses,checkpoint").
Result<TechniqueSet> parse_techniques(const std::string& text);
TechniqueSet all_techniques();
bool has(const TechniqueSet& s, Technique t);
// The smallest tile the search considers: thinner matmuls run too far below peak to pay.
std::int64_t min_tile_tokens(const ModelConfig& m);

// The technique value v of knob `id` needs; none for plain values.
std::optional<Technique> technique_for(KnobId id, KnobValue v);
// Whether `allowed` lets knob `id` take value v (plain values always).
bool technique_allows(const TechniqueSet& allowed, KnobId id, KnobValue v);

// A fixed knob whose value needs a technique outside `allowed` is BadInput naming its flag.
Result<bool> check_knobs_allowed(const Knobs& k, const TechniqueSet& allowed);

// The knobs as given, the others at their plain values, or at the value a given knob needs
// (zero3 for parameter offload, full checkpointing for checkpoint offload): what
// `plan --no-search` evaluates.
Plan with_knobs(Plan base, const Knobs& knobs);

// The values the search tries for knob `id` in `p`, whose rows above `id` are already chosen:
// the fixed value if there is one, else the row's candidates that `allowed` and the row's
// requirement permit, in the row's order.
std::vector<KnobValue> knob_candidates(KnobId id, const Plan& p, const TechniqueSet& allowed, const Knobs& fixed);

// The knobs of `section` as the plan file's keys, and back into p (each missing or wrong
// field named "section.name").
void knobs_to_json(const Plan& p, const std::string& section, nlohmann::json& out);
Result<bool> knobs_from_json(const nlohmann::json& in, const std::string& section, Plan& p);

// "sharding zero3, ulysses 2, ...": every knob of the parallel section (all_rows), or only
// those away from their plain value.
std::string describe_knobs(const Plan& p, bool all_rows = true);

}  // namespace longctx
