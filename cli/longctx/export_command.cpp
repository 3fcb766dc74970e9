// `longctx export PLAN --stack WORD [-o FILE|DIR]`: the plan as the files a training stack
// runs it with, and the script that launches them (docs/export.md). Approximations go to
// stderr, one per line; a knob the stack cannot run within the plan's memory exits 2 naming
// the knob and the stack. The launch script finds the configs beside it, so it is written only
// into a folder: printed, or written as one FILE, a stack's configs come without it.
#include <filesystem>
#include <map>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/longctx/cluster_options.h"
#include "cli/common/commands.h"
#include "cli/longctx/plan_argument.h"
#include "common/atomic_file.h"
#include "common/atomic_folder.h"
#include "planner/core/units.h"
#include "planner/io/export.h"
#include "planner/search/memory_model.h"
#include "planner/stacks/launch_script.h"
#include "planner/stacks/profile.h"

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

// The stack's configuration files: every file but the launch script.
std::map<std::string, std::string> configs_of(const ExportedFiles& e) {
  auto configs = e.files;
  configs.erase(kLaunchScriptFile);
  return configs;
}

void note_launch_script_left_out() {
  fmt::print(stderr, "note: {} (the launch script, which finds the configs beside it) is written only when -o names "
                     "a folder\n",
             kLaunchScriptFile);
}

// What export writes never replaces the plan it reads: -o itself, or a file of the set where
// -o names a folder (a plan saved as the folder's ds_config.json).
Result<bool> check_plan_kept(const ExportedFiles& e, const std::string& output, const std::string& plan_file,
                             bool into_folder) {
  const std::vector<NamedPath> plan{{plan_file, "the plan file"}};
  if (!into_folder) return check_distinct_output(output, "-o", plan);
  for (const auto& [name, text] : e.files) {
    LONGCTX_TRY(auto apart, check_distinct_output((std::filesystem::path(output) / name).string(), "-o", plan));
    (void)apart;
  }
  return true;
}

// A folder the set goes into holds no file of another export's names that this set does not
// write (sft_config.json beside an FSDP2 set's training_args.json, a ds_config.json an earlier
// DeepSpeed set left): a launch script or the user's own script beside them would read it as
// this plan's. Refused, never removed: the file may be the user's.
Result<bool> check_no_other_set(const ExportedFiles& e, const std::string& folder) {
  std::vector<std::string> others;
  for (const std::string& name : every_export_file_name()) {
    std::error_code ec;
    if (!e.files.count(name) && std::filesystem::exists(std::filesystem::symlink_status(std::filesystem::path(folder) / name, ec)))
      others.push_back(name);
  }
  if (others.empty()) return true;
  std::vector<std::string> set;
  for (const auto& [name, text] : e.files) set.push_back(name);
  const char* them = others.size() == 1 ? "it" : "them";
  return Error::bad_input(
      "-o", fmt::format("'{}' holds {} from another export, which this set ({}) does not write: a script beside them "
                        "would read {} as this plan's; remove {}, or export into an empty folder",
                        folder, fmt::join(others, ", "), fmt::join(set, ", "), them, them));
}

int write_files(const ExportedFiles& e, const std::string& output, const std::string& plan_file) {
  const auto configs = configs_of(e);
  const bool into_folder = configs.size() != 1 || names_a_folder(output);
  if (auto kept = check_plan_kept(e, output, plan_file, into_folder); !kept) return report_error(kept.error());
  if (!into_folder) {
    const auto& [name, text] = *configs.begin();
    if (auto w = write_text_atomically(output, "-o", text); !w) return report_error(w.error());
    fmt::print("wrote {} ({})\n", output, name);
    note_launch_script_left_out();
    return 0;
  }
  if (auto apart = check_no_other_set(e, output); !apart) return report_error(apart.error());
  // The set is one unit (common/atomic_folder.h): every file replaced, or none.
  auto w = write_files_atomically(output, "-o", e.files);
  if (!w) return report_error(w.error());
  const std::string folder = output.size() > 1 && output.back() == '/' ? output.substr(0, output.size() - 1) : output;
  for (const auto& name : w->added) fmt::print("wrote {}/{} (new)\n", folder, name);
  for (const auto& name : w->replaced) fmt::print("wrote {}/{} (replaced)\n", folder, name);
  fmt::print("the set's {} file(s) are in place together\n", e.files.size());
  if (e.files.count(kLaunchScriptFile)) {
    // Runnable as ./launch.sh too; a failure leaves `bash launch.sh`, which the script's comment names.
    std::error_code ec;
    std::filesystem::permissions(std::filesystem::path(folder) / kLaunchScriptFile,
                                 std::filesystem::perms::owner_exec | std::filesystem::perms::group_exec |
                                     std::filesystem::perms::others_exec,
                                 std::filesystem::perm_options::add, ec);
  }
  return 0;
}

int run_export(const ExportOptions& o) {
  auto stack = parse_stack(o.stack, "--stack");
  if (!stack) return report_error(stack.error());
  auto plan = read_plan_file(o.plan_file);
  if (!plan) return report_error(as_plan_argument(plan.error()));
  auto exported = export_plan(*plan, *stack);
  if (!exported) return report_error(exported.error());
  for (const auto& line : exported->approximations) fmt::print(stderr, "approximation: {}\n", line);
  // A plan that does not fit (`plan --no-search` writes one) exports as asked: its run is the
  // one the plan predicts, out of memory. Said once, on stderr, and, as `plan --no-search`
  // does, by exit status 3 once the files are written: a script checking $? learns it too.
  const Prediction pr = evaluate(*plan).plan.prediction;
  const int status = pr.feasible ? 0 : exit_status(ErrorKind::NoFit);
  if (!pr.feasible) fmt::print(stderr, "note: {}\n", does_not_fit_note(*plan, pr));
  if (!o.output.empty()) {
    const int written = write_files(*exported, o.output, o.plan_file);
    return written != 0 ? written : status;
  }
  const auto configs = configs_of(*exported);
  const bool one = configs.size() == 1;
  for (const auto& [name, text] : configs) fmt::print("{}{}", one ? "" : fmt::format("==> {} <==\n", name), text);
  note_launch_script_left_out();
  return status;
}

// --stack's help from the registry: every stack's word and what it writes.
std::string stack_words_help() {
  std::string help;
  for (const StackProfile* s : stack_profiles())
    help += fmt::format("{}{}: {}", help.empty() ? "" : "; ", s->exporter->word, s->exporter->files);
  return help + fmt::format("; each with {} (into a folder)", kLaunchScriptFile);
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* sub = app.add_subcommand("export", "Write the configuration a training stack needs to run a plan, and the "
                                           "script that launches it");
  sub->add_option("plan", o->plan_file, "Plan file written by `longctx plan -o` or `longctx max-context -o`")->required();
  sub->add_option("--stack", o->stack, stack_words_help())->required();
  sub->add_option("-o,--output", o->output,
                  "File (one-file stacks) or folder (made if missing; end it in '/' for a one-file stack) to write; "
                  "without it the files are printed");
  return {sub, [o] { return run_export(*o); }};
}

}  // namespace longctx::cli
