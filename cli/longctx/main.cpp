// longctx: plan, run and check long-context training of Llama-family models.
#include <malloc.h>

#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/common/commands.h"
#include "cli/common/parse_errors.h"
#include "cli/common/parse_values.h"
#include "cli/common/standard_output.h"
#include "common/interrupted_writes.h"
#include "cli/longctx/runtime_exec.h"

namespace {

// A query builds and drops thousands of step graphs and allocator scripts of a few MiB each.
// glibc maps each such buffer from the kernel and unmaps it on free (above its mmap threshold,
// or trims the heap's top), so every one costs a page fault per 4 KiB page: up to half of a
// query's CPU time was system time (Qwen3-32B on 8 GPUs: 218,486 faults, 0.53 s of 1.28 s).
// Kept in the heap and reused, the same query faults 1,752 times. 32 MiB is the largest
// threshold glibc takes; a short-lived process loses nothing by not trimming.
void keep_large_buffers_in_the_heap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

int main(int argc, char** argv) {
  longctx::cli::ignore_file_size_signal();
  longctx::remove_temporaries_when_interrupted();  // Ctrl-C leaves no half-written temporary
  keep_large_buffers_in_the_heap();
  CLI::App app{
      "longctx: which memory techniques let a Llama-family model train at sequence length S on N "
      "GPUs, how fast, and how long a context can it reach? It answers with a plan, runs the plan "
      "as a real LibTorch training step, and shows predicted beside measured memory.\n\n"
      "Sizes: tokens take K and M (x1024: 128K = 131072); bytes take KiB, MiB, GiB, TiB.\n"
      "Exit status: 0 success, 2 bad input, 3 no plan fits, 1 anything else."};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version,
               "Print longctx's version, the LibTorch, CUDA and NCCL versions it was built with, and whether a GPU is "
               "visible now");
  std::vector<longctx::cli::Command> commands;
  commands.push_back(longctx::cli::add_max_context_command(app));
  commands.push_back(longctx::cli::add_plan_command(app));
  commands.push_back(longctx::cli::add_explain_command(app));
  commands.push_back(longctx::cli::add_models_command(app));
  commands.push_back(longctx::cli::add_run_forward_command(app));
  commands.push_back(longctx::cli::add_calibrate_forward_command(app));
  commands.push_back(longctx::cli::add_compare_command(app));
  commands.push_back(longctx::cli::add_export_command(app));

  longctx::cli::apply_value_rules(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return longctx::cli::report_parse_error(app, e);
  }
  if (version) {
    if (longctx::cli::runtime_available()) return longctx::cli::exec_runtime({"--version"});
    std::printf("longctx %s\nLibTorch: not built (planner only)\n", LONGCTX_VERSION);
    return 0;
  }
  for (const auto& c : commands)
    if (c.app->parsed()) return longctx::cli::run_to_standard_output(c);
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
