#pragma once
// The knob table: every knob of a plan the search may turn, one row each. Everything that
// lists the knobs is derived from it: the `--techniques` words (the Technique enum), the
// search's candidates, which of them a word allows and which rows it searches fine
// (search_space.h), the `plan` flags and their --help text (cli/plan_command.cpp), the plan
// file's keys (plan_io.cpp), the Python keywords (python/src/core.cpp), plan descriptions
// (cli/plan_output.cpp, `run`'s header), and the rules of one knob that validate() applies
// (bounds, requirements, the row's own rule, values only some stacks run).
//
// The settings the search never turns (the stack, its options, the dtypes) are the settings
// table's (settings.h). Adding a knob costs one row below, plus its footprint (a field of
// ParallelConfig or TrainConfig, its bytes in the step builder), a rule spanning knobs in
// validate() if it has one, and its runtime implementation.
#include <cstdint>
#include <bitset>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/core/limits.h"
#include "planner/core/plan.h"
#include "planner/core/value_codec.h"
#include "common/result.h"

namespace longctx {

// How a row's candidates are found when the knob is not fixed. Listed: the row's `listed`
// values. Ulysses: every degree that divides the GPUs and passes the row's rule (the heads).
// Ring: every ring degree r that, times the chosen Ulysses degree, divides the GPUs. HeadChunk:
// 0 and every chunk of the local heads the row's rule takes, largest (fastest) first. Tiles:
// 1, the powers of two that leave tiles of the smallest length, and the count that makes the
// largest tile at most that length (tiles may be uneven: parallel_config.h, tile_split), or
// the count the plan's stack picks itself (stack_tiles.h).
enum class Candidates { Listed, Ulysses, Ring, HeadChunk, Tiles };

// A row's dependency: values above the plain one need `knob` above its plain value (any) or
// at `value`; unfixed, `knob` is set to `value` by with_knobs() where `exactly`.
enum class KnobId;
struct Requirement {
  KnobId knob;
  KnobValue value;
  bool exactly;     // true: needs `knob` == value; false: any value above plain
  const char* why;  // completes the refusal: "only parameter shards are offloaded"
};

// Why value v of a row is refused in plan p (whose rows above it are chosen), or nothing: a
// row's own rule, which the search's candidates apply value by value (knob_rules.cpp).
// `explain` false: a refusal carries no message (the search asks only whether, tens of
// thousands of times a query; validate() asks why).
using Refusal = std::optional<std::string>;
namespace knob_rules {
Refusal ulysses(const Plan& p, KnobValue u, bool explain);
Refusal ring(const Plan& p, KnobValue r, bool explain);
Refusal head_chunk(const Plan& p, KnobValue chunk, bool explain);
Refusal tiles(const Plan& p, KnobValue tiles, bool explain);
}  // namespace knob_rules

struct KnobRule {
  const char* label;                  // in plan descriptions: "<label> <value>", or the label alone for switches
  const char* help;                   // the --help text of its flag
  Candidates candidates = Candidates::Listed;
  std::vector<KnobValue> listed = {};  // Listed: in the order the search tries them
  std::optional<Requirement> needs = {};
  // Its values above the plain one need the technique of that row's (ring_exchange: ring's).
  std::optional<KnobId> technique_of = {};
  const char* plain_text = nullptr;   // description at the plain value, instead of "<label> <value>" ("": none)
  std::int64_t min = 0, max = 0;      // integer knobs: the bounds a plan may hold (limits.h)
  Refusal (*check)(const Plan&, KnobValue, bool explain) = nullptr;  // the row's own rule, given the rows above it
  // Values only some stacks run (checkpoint op: torchtitan's per-op selective checkpointing):
  // a stack runs one where its profile lists it (StackProfile::own_values).
  std::vector<KnobValue> stack_values = {};
  bool fine = false;                  // searched inside each choice of the others, by search.h's bounds
  // Newer than plan files: written only away from its plain value, read as plain when absent,
  // so files (and their fingerprints) of plans without it stay as they were.
  bool optional_in_file = false;
};

// clang-format off
// ROW(field, C++ type, section, techniques, rule). `field` is the knob's name everywhere: the
// member of Knobs and of the plan's `section` (ParallelConfig or TrainConfig), the plan file's
// key "section.field", the flag --field (underscores as dashes) and the Python keyword. Rows
// are in the search's order: each coarse row is enumerated inside the ones above it, then the
// fine rows, which the search nests in this order too (search.cpp).
//
// `techniques`: the --techniques words the row brings, each LONGCTX_TECHNIQUE(Enumerator,
// "word", position). Value plain + i (i >= 1) needs the i-th of them, the last for every value
// beyond: sharding's zero1..zero3 are three words, a Ulysses degree above 1 one. `position` is
// the word's place in every list of them (--help, the max-context ladder's JSON), which scripts
// and the recorded answers read: it stays when rows are added.
#define LONGCTX_KNOB_TABLE(ROW)                                                                                     \
  ROW(sharding, Sharding, parallel,                                                                                \
      (LONGCTX_TECHNIQUE(Zero1, "zero1", 0) LONGCTX_TECHNIQUE(Zero2, "zero2", 1) LONGCTX_TECHNIQUE(Zero3, "zero3", 2)), \
      (KnobRule{.label = "sharding", .help = "none|zero1|zero2|zero3", .listed = {0, 1, 2, 3}}))                   \
  ROW(ulysses, int, parallel, (LONGCTX_TECHNIQUE(Ulysses, "ulysses", 5)), (KnobRule{                               \
      .label = "ulysses", .help = "Sequence-parallel degree u (divides the GPUs and the query heads)",            \
      .candidates = Candidates::Ulysses, .min = 1, .max = limits::kMaxHeads, .check = knob_rules::ulysses}))       \
  ROW(ring, int, parallel, (LONGCTX_TECHNIQUE(Ring, "ring", 11)), (KnobRule{                                       \
      .label = "ring", .help = "Ring-attention (context-parallel) degree r: u x r ranks share a sample",           \
      .candidates = Candidates::Ring, .plain_text = "no ring", .min = 1, .max = limits::kMaxGpus,                 \
      .check = knob_rules::ring, .optional_in_file = true}))                                                        \
  ROW(ring_exchange, RingExchange, parallel, (), (KnobRule{                                                        \
      .label = "ring exchange", .help = "p2p|allgather: k/v passed round the ring, or gathered whole (--ring > 1)", \
      .listed = {0, 1},                                                                                            \
      .needs = Requirement{KnobId::ring, 2, false, "it chooses how ring attention exchanges k/v"},                \
      .technique_of = KnobId::ring, .plain_text = "", .optional_in_file = true}))                                  \
  ROW(checkpoint, CheckpointPolicy, parallel, (LONGCTX_TECHNIQUE(Checkpoint, "checkpoint", 7)), (KnobRule{         \
      .label = "checkpoint", .help = "none|full|every:K|op (op: torchtitan's per-op selective, --stack torchtitan)", \
      .listed = {0, 2, 1, kCheckpointOps}, .stack_values = {kCheckpointOps}}))                                      \
  ROW(offload_checkpoints, bool, parallel, (LONGCTX_TECHNIQUE(OffloadCheckpoints, "offload-checkpoints", 8)),      \
      (KnobRule{.label = "checkpoints offloaded", .help = "Keep checkpointed layer inputs in host memory",        \
      .listed = {0, 1},                                                                                            \
      .needs = Requirement{KnobId::checkpoint, 1, false, "only checkpointed layer inputs are offloaded"}}))         \
  ROW(offload_optimizer, bool, parallel, (LONGCTX_TECHNIQUE(OffloadOptimizer, "offload-optimizer", 3)), (KnobRule{ \
      .label = "optimizer offloaded", .help = "fp32 master weights and moments in host memory, step on the CPU",  \
      .listed = {0, 1}}))                                                                                          \
  ROW(offload_params, bool, parallel, (LONGCTX_TECHNIQUE(OffloadParams, "offload-params", 4)), (KnobRule{          \
      .label = "params offloaded", .help = "zero3 parameter shards in host memory", .listed = {0, 1},             \
      .needs = Requirement{KnobId::sharding, 3, true, "only parameter shards are offloaded"}}))                    \
  ROW(micro_batch, std::int64_t, train, (), (KnobRule{                                                             \
      .label = "micro-batch", .help = "Samples per data-parallel rank", .listed = {1, 2, 4},                      \
      .min = 1, .max = limits::kMaxMicroBatch}))                                                                   \
  ROW(head_chunk, int, parallel, (LONGCTX_TECHNIQUE(Untied, "untied", 6)), (KnobRule{                              \
      .label = "untied head chunk", .help = "Untied Ulysses: query heads per stage per rank (0: off)",            \
      .candidates = Candidates::HeadChunk, .plain_text = "heads unchunked", .min = 0, .max = limits::kMaxHeads,   \
      .check = knob_rules::head_chunk, .fine = true}))                                                              \
  ROW(mlp_tiles, int, parallel, (LONGCTX_TECHNIQUE(TiledMlp, "tiled-mlp", 9)), (KnobRule{                          \
      .label = "mlp tiles", .help = "Tiles of the MLP over the local sequence (1: untiled)",                      \
      .candidates = Candidates::Tiles, .min = 1, .max = limits::kMaxTiles, .check = knob_rules::tiles,             \
      .fine = true}))                                                                                              \
  ROW(loss_tiles, int, parallel, (LONGCTX_TECHNIQUE(TiledLoss, "tiled-loss", 10)), (KnobRule{                      \
      .label = "loss tiles", .help = "Tiles of the output projection + loss (1: full logits)",                    \
      .candidates = Candidates::Tiles, .min = 1, .max = limits::kMaxTiles, .check = knob_rules::tiles,             \
      .fine = true}))
// clang-format on

#define LONGCTX_EXPAND_TECHNIQUES(...) __VA_ARGS__

// The words of `--techniques`, from the rows' `techniques`; each enumerator's value is its
// position among the words.
enum class Technique {
#define LONGCTX_TECHNIQUE(name, word, position) name = position,
#define LONGCTX_KNOB_TECHNIQUES(field, Type, section, techniques, rule) LONGCTX_EXPAND_TECHNIQUES techniques
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_TECHNIQUES)
#undef LONGCTX_TECHNIQUE
};
#define LONGCTX_TECHNIQUE(name, word, position) +1
inline constexpr int kTechniques = 0 LONGCTX_KNOB_TABLE(LONGCTX_KNOB_TECHNIQUES);
#undef LONGCTX_TECHNIQUE
#undef LONGCTX_KNOB_TECHNIQUES
using TechniqueSet = std::bitset<kTechniques>;

enum class KnobId {
#define LONGCTX_KNOB_ID(field, Type, section, techniques, rule) field,
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_ID)
#undef LONGCTX_KNOB_ID
};
#define LONGCTX_KNOB_COUNT(field, Type, section, techniques, rule) +1
inline constexpr std::size_t kKnobCount = 0 LONGCTX_KNOB_TABLE(LONGCTX_KNOB_COUNT);
#undef LONGCTX_KNOB_COUNT
#define LONGCTX_KNOB_FINE(field, Type, section, techniques, rule) +(rule.fine ? 1 : 0)
inline constexpr std::size_t kFineKnobs = 0 LONGCTX_KNOB_TABLE(LONGCTX_KNOB_FINE);
#undef LONGCTX_KNOB_FINE

// Knobs the user fixed; the others are searched.
struct Knobs {
#define LONGCTX_KNOB_MEMBER(field, Type, section, techniques, rule) std::optional<Type> field;
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_MEMBER)
#undef LONGCTX_KNOB_MEMBER
};

// One row as the rest of longctx reads it.
struct Knob {
  KnobId id;
  const char* name;       // "head_chunk"
  std::string flag;       // "--head-chunk"
  const char* section;    // "parallel" or "train": the plan file's object, key `name`
  KnobKind kind;
  KnobRule rule;
  KnobValue plain;        // its value in a default Plan: what an unfixed knob is when not searched
  std::vector<Technique> techniques;  // its --techniques words, in the order of its values
  std::string key() const { return std::string(section) + "." + name; }  // "parallel.head_chunk"
};

// Every row, in table order.
const std::vector<Knob>& knob_table();
const Knob& knob(KnobId id);
// The fine rows, in table order: the order the search nests them in.
const std::vector<KnobId>& fine_knobs();

KnobValue knob_value(const Plan& p, KnobId id);
void set_knob(Plan& p, KnobId id, KnobValue v);
std::optional<KnobValue> fixed_value(const Knobs& k, KnobId id);
void fix(Knobs& k, KnobId id, KnobValue v);
// Whether p holds a value the row can write and read back (an enumerator it names, every:K
// with K >= 1): what a plan built in code may miss.
bool holds_knob_value(const Plan& p, KnobId id);

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

// The rules of row `id` alone on p's value, in p's context (the rows above it): its bounds,
// its requirement and its own rule. BadInput names the row's flag.
Result<bool> check_knob(const Plan& p, KnobId id);

// The knobs as given, the others at their plain values, or at the value a given knob needs
// (zero3 for parameter offload, full checkpointing for checkpoint offload), and those the
// plan's stack decides itself at its value: what `plan --no-search` evaluates.
Plan with_knobs(Plan base, const Knobs& knobs);

// The values the search tries for knob `id` in `p`, whose rows above `id` are already chosen:
// the fixed value if there is one, else the row's candidates that `allowed`, the plan's stack's
// techniques, the row's requirement and its own rule permit, in the row's order. Rules that
// span rows are validate()'s, once per choice: a candidate may still break one.
std::vector<KnobValue> knob_candidates(KnobId id, const Plan& p, const TechniqueSet& allowed, const Knobs& fixed);

// The knobs of `section` as the plan file's keys, and back into p (each missing or wrong
// field named "section.name").
void knobs_to_json(const Plan& p, const std::string& section, nlohmann::json& out);
Result<bool> knobs_from_json(const nlohmann::json& in, const std::string& section, Plan& p);

// "sharding zero3, ulysses 2, ...": every knob of the parallel section (all_rows), or only
// those away from their plain value.
std::string describe_knobs(const Plan& p, bool all_rows = true);

}  // namespace longctx
