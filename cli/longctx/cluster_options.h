#pragma once
// Options that `plan` and `max-context` share: the model, the cluster and its budgets.
#include <CLI/CLI.hpp>

#include "planner/search/request.h"

namespace longctx::cli {

// The request's fields (request.h) plus how to print the answer.
struct ClusterOptions : ClusterRequest {
  bool json = false;
};

// `every_stack`: --stack also takes `all` (max-context: every stack's answer).
void add_cluster_options(CLI::App& app, ClusterOptions& o, bool every_stack = false);

// Prints an error the way every command does and returns its exit status.
int report(const Error& e);

}  // namespace longctx::cli
