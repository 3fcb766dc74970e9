// `longctx export PLAN --stack arctic|hf|deepspeed [-o FILE|DIR]`: the plan as the files a
// training stack runs it with (docs/export.md). Approximations go to stderr, one per line;
// a knob the stack cannot run within the plan's memory exits 2 naming the knob and the stack.
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "cli/longctx/cluster_options.h"
#include "cli/common/commands.h"
#include "common/atomic_file.h"
#include "common/atomic_folder.h"
#include "planner/io/export.h"

namespace longctx::cli {
namespace {

struct ExportOptions {
  std::string plan_file;
  std::string stack;
  std::string output;
};

// Whether `output` asks for a folder: an existing one, or a path ending in a separator.
bool names_a_folder(const std::string& output) {
  std::error_code ec;
  return std::filesystem::is_directory(output, ec) || (!output.empty() && output.back() == '/');
}

int write_files(const ExportedFiles& e, const std::string& output) {
  if (e.files.size() == 1 && !names_a_folder(output)) {
    const auto& [name, text] = *e.files.begin();
    if (auto w = write_text_atomically(output, "-o", text); !w) return report(w.error());
    fmt::print("wrote {} ({})\n", output, name);
    return 0;
  }
  // The set is one unit (common/atomic_folder.h): every file replaced, or none.
  auto w = write_files_atomically(output, "-o", e.files);
  if (!w) return report(w.error());
  const std::string folder = output.size() > 1 && output.back() == '/' ? output.substr(0, output.size() - 1) : output;
  for (const auto& name : w->added) fmt::print("wrote {}/{} (new)\n", folder, name);
  for (const auto& name : w->replaced) fmt::print("wrote {}/{} (replaced)\n", folder, name);
  fmt::print("the set's {} file(s) are in place together\n", e.files.size());
  return 0;
}

int run_export(const ExportOptions& o) {
  auto stack = parse_stack(o.stack, "--stack");
  if (!stack) return report(stack.error());
  auto plan = read_plan_file(o.plan_file);
  if (!plan) return report(plan.error());
  auto exported = export_plan(*plan, *stack);
  if (!exported) return report(exported.error());
  for (const auto& line : exported->approximations) fmt::print(stderr, "approximation: {}\n", line);
  if (!o.output.empty()) return write_files(*exported, o.output);
  const bool one = exported->files.size() == 1;
  for (const auto& [name, text] : exported->files) fmt::print("{}{}", one ? "" : fmt::format("==> {} <==\n", name), text);
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* sub = app.add_subcommand("export", "Write the configuration a training stack (DeepSpeed, ArcticTraining, Hugging Face) "
                                           "needs to run a plan");
  sub->add_option("plan", o->plan_file, "Plan file written by `longctx plan -o`")->required();
  sub->add_option("--stack", o->stack,
                  "deepspeed: ds_config.json; arctic: an ArcticTraining recipe (YAML); hf: accelerate config, "
                  "TrainingArguments JSON and, under DeepSpeed, ds_config.json")
      ->required();
  sub->add_option("-o,--output", o->output,
                  "File (one-file stacks) or folder (made if missing; end it in '/' for a one-file stack) to write; "
                  "without it the files are printed");
  return {sub, [o] { return run_export(*o); }};
}

}  // namespace longctx::cli
