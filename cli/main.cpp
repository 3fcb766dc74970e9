// longctx: plan, run and check long-context training of Llama-family models.
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "longctx: which memory techniques let a Llama-family model train at sequence length S on N "
      "GPUs, how fast, and how long a context can it reach? It answers with a plan, runs the plan "
      "as a real LibTorch training step, and shows predicted beside measured memory.\n\n"
      "Sizes: tokens take K and M (x1024: 128K = 131072); bytes take KiB, MiB, GiB, TiB.\n"
      "Exit status: 0 success, 2 bad input, 3 no plan fits, 1 anything else."};
  app.require_subcommand(0, 1);
  bool version = false;
  longctx::cli::add_version_flag(app, version);
  std::vector<longctx::cli::Command> commands;
  commands.push_back(longctx::cli::add_models_command(app));
  commands.push_back(longctx::cli::add_run_command(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (version) return longctx::cli::print_version();
  for (const auto& c : commands)
    if (c.app->parsed()) return c.run();
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
