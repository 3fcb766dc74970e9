#pragma once
// Each subcommand registers its options on the CLI11 app; main runs the one that was parsed.
#include <functional>

#include <CLI/CLI.hpp>

namespace longctx::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit status
};

void add_version_flag(CLI::App& app, bool& requested);
int print_version();
Command add_models_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_max_context_command(CLI::App& app);
Command add_explain_command(CLI::App& app);
Command add_run_forward_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);  // longctx-runtime
Command add_calibrate_forward_command(CLI::App& app);

}  // namespace longctx::cli
