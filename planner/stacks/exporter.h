#pragma once
// A stack's export (docs/export.md): the configuration files a training stack runs a plan
// with, written by the stack's own writer (planner/stacks/<name>/export.cpp) and named by one
// `longctx export --stack` word; planner/io/export.h renders them as text. Pure functions of
// the plan: no file is read or written here.
//
// Each knob is expressed exactly, approximated, or refused:
//   - approximated where the stack runs the knob with no more device memory than the plan
//     predicts (all layers checkpointed for every:k, Liger's chunked cross-entropy for loss
//     tiles, ArcticTraining's own MLP shard count): the files are written and each
//     approximation is returned as one line for the caller to print;
//   - refused (BadInput naming the knob and the stack) where the stack would hold more than
//     the plan does (head-chunked attention anywhere, MLP tiles outside ArcticTraining, loss
//     tiles in a bare DeepSpeed config, checkpoint offload under Hugging Face).
// Then, for a plan made for another stack, the whole step: where this stack's own step as its
// files run it (as_run) does not fit the budget and the plan does, refused naming train.stack
// (io/export.h, check_expressible).
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "planner/core/plan.h"

namespace longctx {

// One configuration object and what it runs differently from the plan ("knob: what and why").
struct StackConfig {
  nlohmann::json value;
  std::vector<std::string> approximations;
};

// One file a stack runs a plan with: its content, and the format it is written in (YAML and
// TOML with `comment` lines above it; Text: `value` is the file's text, a script).
struct ExportFile {
  enum class Format { Json, Yaml, Toml, Text };
  std::string name;
  Format format = Format::Json;
  nlohmann::json value;
  std::vector<std::string> comment;
};

// Every file a stack needs, and the approximations made in writing them.
struct StackFiles {
  std::vector<ExportFile> files;
  std::vector<std::string> approximations;
};

// One `longctx export --stack WORD`: a stack's writer and its refusals.
struct StackExporter {
  const char* word;  // "deepspeed", "hf", "arctic", "torchtitan"
  const char* files;  // what it writes, for `export --help`: "ds_config.json (a DeepSpeed config)"
  // The name of every file it may write, whatever the plan (launch.sh among them): an export
  // into a folder holding another of any exporter's names refuses (export_command.cpp).
  std::span<const char* const> file_names;
  // What a plan made for this stack predicts ("transformers alone"): such a plan is exported
  // with this word only. Null: the stack's plans are exported with any word.
  const char* plans_predict;
  // BadInput naming the knob where the stack cannot run the plan within the memory it predicts.
  Result<bool> (*check)(const Plan& p);
  // The files. REQUIRES: check(p) holds.
  StackFiles (*write)(const Plan& p);
  // For a plan `p` made for another stack: the plan of this stack's own step that its files
  // run (the same knobs, with the ones the stack decides itself set as it runs them), where
  // longctx models that step; check_expressible (io/export.h) holds it to p's budget. Nothing
  // where p is this stack's own plan, or where the files run a step the stack's model does not
  // cover (it then judges by the knob rules alone). Null: the files run p's own step.
  std::optional<Plan> (*as_run)(const Plan& p) = nullptr;
};

// One knob a stack cannot run within the plan's memory, and why.
struct ExportRefusal {
  const char* knob;  // the plan file's field
  bool (*applies)(const Plan& p);
  const char* why;  // completes "--stack X cannot ..."
  const char* fix;
};
// The refusals several stacks share: longctx's ring attention (where the stack's Ulysses
// attends over the whole sequence), head-chunked attention, and tiled MLPs.
inline bool plan_has_ring(const Plan& p) { return p.parallel.ring > 1; }
inline bool plan_has_head_chunks(const Plan& p) { return p.parallel.head_chunk > 0; }
inline bool plan_has_mlp_tiles(const Plan& p) { return p.parallel.mlp_tiles > 1; }
inline constexpr ExportRefusal kUlyssesRingRefusal = {
    "parallel.ring", plan_has_ring,
    "run ring attention (its Ulysses attends over the whole sequence on each rank): each rank would hold r times "
    "the tokens the plan predicts in attention",
    "re-plan with --ring 1"};
inline constexpr ExportRefusal kHeadChunkRefusal = {
    "parallel.head_chunk", plan_has_head_chunks,
    "run head-chunked (untied) Ulysses attention: it attends over all local heads at once, holding more than the "
    "plan predicts",
    "re-plan with --head-chunk 0"};
inline constexpr ExportRefusal kMlpTilesRefusal = {
    "parallel.mlp_tiles", plan_has_mlp_tiles,
    "tile the MLP (that is model code, not configuration): the untiled MLP holds more than the plan predicts",
    "use --stack arctic (tiled_mlp_compute) or re-plan with --mlp-tiles 1"};

// BadInput naming the first refusal of `refusals` that applies to p (and `word`'s stack);
// true where none does.
Result<bool> first_refusal(const Plan& p, const char* word, std::span<const ExportRefusal> refusals);

// The first comment line of a stack's files: "longctx export --stack WORD: model ..., seq ...".
std::string export_header(const Plan& p, const char* word);
// "bf16" or "fp32".
const char* dtype_name(DType t);
// The approximation of an every:k checkpoint policy by a stack that checkpoints every layer
// (`how` names its mechanism), if the plan has one.
void add_checkpoint_notes(const Plan& p, const char* how, std::vector<std::string>& notes);

}  // namespace longctx
