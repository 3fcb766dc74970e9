#pragma once
// Options that `plan` and `max-context` share: the model, the cluster and its budgets.
#include <CLI/CLI.hpp>

#include "cli/common/error_report.h"
#include "planner/search/request.h"

namespace longctx::cli {

// The request's fields (request.h) plus how to print the answer.
struct ClusterOptions : ClusterRequest {
  bool json = false;
};

// `every_stack`: --stack also takes `all` (max-context: every stack's answer).
void add_cluster_options(CLI::App& app, ClusterOptions& o, bool every_stack = false);

}  // namespace longctx::cli
