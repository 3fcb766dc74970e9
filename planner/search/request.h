#pragma once
// What a user asks, before any defaults are applied: the model, the cluster and its budgets,
// the techniques the search may use, the settings (settings.h), and for a plan the sequence
// and the knobs fixed. The CLI's flags and the Python API's arguments both fill these;
// resolving them here is the one place their defaults live, and validate() (which plan files
// meet too) the one place their rules do, so both front ends answer the same question the
// same way. Errors name the CLI flag (`--gpus`), which the Python API reports as its field too.
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "planner/core/knobs.h"
#include "planner/core/settings.h"
#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "common/result.h"
#include "planner/search/search.h"

namespace longctx {

struct ClusterRequest {
  std::string model = "llama-3.1-8b";  // preset name or path of a Hugging Face config.json
  std::string model_config_json;       // a config.json's text; when set, it is the model (named `model`)
  std::int64_t gpus = 8;
  std::optional<std::int64_t> gpus_per_node;  // default: the preset's, at most `gpus`
  std::string gpu = "h100-80gb";              // hardware preset
  std::string budget;                         // per-GPU device memory, e.g. "80GiB"; default: the preset's
  std::string host_mem;                       // per node; default: the preset's
  bool expandable_segments = false;           // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  std::string techniques = "all";             // what the search may use
  // The settings (settings.h), as given: a word ("" for the default: the hardware's dtype,
  // the stack's option), or whether a switch's flag was given.
#define LONGCTX_SETTING_FIELD(field, Type, member, rule) \
  std::conditional_t<std::is_same_v<Type, bool>, bool, std::string> field = {};
  LONGCTX_SETTING_TABLE(LONGCTX_SETTING_FIELD)
#undef LONGCTX_SETTING_FIELD
};

// The model the request names: its config text when given, else the preset or config.json.
Result<ModelConfig> resolve_model(const ClusterRequest& r);

// Model, hardware, budgets and settings resolved (the stack's options at its defaults where
// not given); the rest of train and parallel left at defaults. Options of another stack are
// refused here; every other rule is validate()'s.
Result<Plan> resolve_cluster(const ClusterRequest& r);

struct PlanRequest {
  ClusterRequest cluster;
  std::string seq;         // tokens, e.g. "128K"
  Knobs knobs;             // fixed; the others are searched
  bool no_search = false;  // evaluate exactly `knobs`, the others at none/1/0/off
};

// The plan a PlanRequest gets: the search's summary, the evaluation of its choice, and the
// plan as its file records it (the prediction per phase included).
struct PlanAnswer {
  SearchResult found;
  Evaluation evaluation;
  Plan recorded;
};

// BadInput for a bad request; NoFit when the search finds nothing that fits. With
// `no_search` a plan that does not fit is an answer (its prediction says so), not an error.
Result<PlanAnswer> answer_plan(const PlanRequest& r);

// The longest sequence any allowed plan trains on the requested cluster.
Result<MaxContextResult> answer_max_context(const ClusterRequest& r, bool with_ladder);

}  // namespace longctx
