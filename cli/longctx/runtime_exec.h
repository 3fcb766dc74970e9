#pragma once
// `longctx` itself does not link LibTorch, whose loading costs about a second before main:
// planning answers at once. `run` and the runtime half of `--version` are served by
// longctx-runtime, installed beside it, which this replaces the process with.
#include <string>
#include <vector>

namespace longctx::cli {

// Whether longctx-runtime was built beside this binary, and its path.
bool runtime_available();
std::string runtime_program();

// Execs longctx-runtime with `args`; returns only on failure, with the exit status to use
// after printing why.
int exec_runtime(const std::vector<std::string>& args);

}  // namespace longctx::cli
