// longctx-runtime: the commands that need LibTorch. `longctx run` and `longctx --version`
// hand over to it, so planning never pays for loading LibTorch.
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/common/commands.h"
#include "cli/common/parse_errors.h"
#include "cli/common/parse_values.h"
#include "cli/common/standard_output.h"
#include "common/interrupted_writes.h"

int main(int argc, char** argv) {
  longctx::cli::ignore_file_size_signal();
  longctx::remove_temporaries_when_interrupted();  // Ctrl-C leaves no half-written temporary
  CLI::App app{"longctx-runtime: runs plan files as LibTorch training steps (use it as `longctx run`)."};
  app.require_subcommand(0, 1);
  bool version = false;
  longctx::cli::add_version_flag(app, version);
  std::vector<longctx::cli::Command> commands;
  commands.push_back(longctx::cli::add_run_command(app));
  commands.push_back(longctx::cli::add_calibrate_command(app));
  longctx::cli::apply_value_rules(app);  // the planner CLI's rule for every value (parse_values.h)
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return longctx::cli::report_parse_error(app, e);
  }
  if (version) return longctx::cli::print_version();
  for (const auto& c : commands)
    if (c.app->parsed()) return longctx::cli::run_to_standard_output(c);
  return 0;
}
