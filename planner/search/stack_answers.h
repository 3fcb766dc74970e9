#pragma once
// `max-context --stack all`: the longest context of every stack in the registry on one
// cluster, beside longctx's own runtime, and the JSON of every max-context and plan answer
// (which stacks can export its plan: io/export.h). The CLI and the Python API both answer from
// here.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"
#include "planner/search/request.h"
#include "planner/search/search.h"

namespace longctx {

// The --stack word that asks for every stack.
inline constexpr const char* kEveryStack = "all";

// One stack's answer: its longest context, or why it has none on this cluster (exactly one set).
struct StackAnswer {
  std::string stack;
  std::optional<MaxContextResult> answer;
  std::optional<Error> refusal;
};

// Called before each stack's search: how many are done, of how many, and the one starting.
using StackProgress = std::function<void(std::size_t done, std::size_t total, const std::string& stack)>;

// Every stack's answer to `r` with its stack replaced, in the registry's order (longctx's own
// runtime first, with the ladder when `with_ladder`; the others without).
std::vector<StackAnswer> answer_max_context_per_stack(const ClusterRequest& r, bool with_ladder,
                                                      const StackProgress& progress = {});

// max_context_json, and "exports": which stacks' files run the plan (exports_json).
nlohmann::json max_context_answer_json(const MaxContextResult& r);
// [{"stack", "max_tokens", "granularity_tokens", "binding", "plan", "exports"} or {"stack", "refusal": {field, message}}].
nlohmann::json stack_answers_json(const std::vector<StackAnswer>& all);

// `plan --json`: the plan file's JSON (the prediction per phase included), "search" (what the
// search did, or that none ran under `no_search`), "exports", and "positions" when --seq runs
// past the model's max_position_embeddings (max_positions_note).
nlohmann::json plan_answer_json(const PlanAnswer& a, bool no_search);

}  // namespace longctx
