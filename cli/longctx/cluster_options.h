#pragma once
// Options that `plan` and `max-context` share: the model, the cluster and its budgets.
#include <CLI/CLI.hpp>

#include <vector>

#include "cli/common/error_report.h"
#include "common/atomic_file.h"
#include "planner/search/request.h"

namespace longctx::cli {

// The request's fields (request.h) plus how to print the answer.
struct ClusterOptions : ClusterRequest {
  bool json = false;
};

// `every_stack`: --stack also takes `all` (max-context: every stack's answer).
void add_cluster_options(CLI::App& app, ClusterOptions& o, bool every_stack = false);

// The files the options read, which an output must not replace: --model's config.json (its
// folder's, or a Hub id's in the cache, where it names one) and --gpu's hardware file.
std::vector<NamedPath> cluster_input_paths(const ClusterOptions& o);

}  // namespace longctx::cli
