// `longctx max-context`: the longest context, its fastest plan, the ladder, and which stacks'
// files run the plan; with --stack all every stack's longest context beside longctx's own.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/common/commands.h"
#include "cli/longctx/cluster_options.h"
#include "cli/longctx/plan_output.h"
#include "cli/longctx/progress_line.h"
#include "common/atomic_file.h"
#include "common/atomic_folder.h"
#include "planner/core/units.h"
#include "planner/io/export.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"
#include "planner/search/search.h"
#include "planner/search/stack_answers.h"
#include "planner/stacks/profile.h"
#include "planner/io/quoted_text.h"

namespace longctx::cli {
namespace {

struct MaxContextOptions {
  ClusterOptions cluster;
  bool no_ladder = false;
  std::string output;  // -o: the answer's plan file
};

void print_ladder(const MaxContextResult& r) {
  fmt::print("\nwhat each technique buys (added in order; each rung keeps the ones above)\n");
  std::vector<std::string> before;
  for (const auto& rung : r.ladder) {
    std::string added;
    for (const auto& t : rung.techniques)
      if (std::find(before.begin(), before.end(), t) == before.end()) added += (added.empty() ? "+" : ", +") + t;
    // Each rung's granularity as the headline's: "exact", or the step its lengths were tried at.
    const std::string step = rung.max_tokens == 0    ? "-"
                             : rung.granularity <= 1 ? "exact"
                                                     : "to " + format_count(rung.granularity);
    fmt::print("  {:<36} {:>13} tokens ({:>6}, {:>9})   limit: {}\n", added, format_count(rung.max_tokens),
               format_tokens(rung.max_tokens), step, rung.binding.empty() ? "-" : rung.binding);
    before = rung.techniques;
  }
}

void print_answer(const MaxContextResult& r) {
  const auto& p = r.plan;
  // Every length up to the answer plans (padded to the layout); one granule more does not.
  const std::string granularity = r.granularity == 1 ? std::string("exact to the token")
                                                     : fmt::format("to a granularity of {} tokens", format_count(r.granularity));
  fmt::print("max context  {}, {}; {} binds beyond it\n", describe_tokens(r.max_tokens), granularity, r.binding);
  fmt::print("model        {} on {} x {} ({} per GPU, {} host per node)\n", terminal_line(p.model.name),
             p.cluster.shape.world(), terminal_line(p.cluster.hardware.name), format_bytes(p.cluster.device_budget_bytes),
             format_bytes(p.cluster.host_budget_bytes_per_node));
  if (const std::string note = budget_note(p); !note.empty()) fmt::print("budget       {}\n", note);
  fmt::print("plan         {}\n", describe_knobs(p));
  if (!r.rule.empty()) fmt::print("rule         {}\n", r.rule);
  if (!r.layout.empty()) fmt::print("layout       {}\n", r.layout);
  if (!r.positions.empty()) fmt::print("positions    {}\n", r.positions);
  fmt::print("memory       device peak {} as nvidia-smi shows it (allocated {} at {}, reserved {}), host {} per node\n",
             format_bytes(p.prediction.peak_nvidia_smi_bytes), format_bytes(p.prediction.peak_device_bytes),
             p.prediction.peak_at, format_bytes(p.prediction.peak_reserved_bytes), format_bytes(p.prediction.peak_host_bytes));
  fmt::print("speed        {:.1f} s per step, {:.0f} tokens/s, MFU {:.1f}%\n", p.prediction.step_time_s,
             p.prediction.tokens_per_s, p.prediction.mfu * 100);
  fmt::print("export       {}\n", describe_exports(p));
  if (!r.ladder.empty()) print_ladder(r);
}

// The table of --stack all: a row a stack, its longest context, what binds, and its plan.
void print_stack_table(const std::vector<StackAnswer>& all, const Plan& headline) {
  fmt::print("\neach stack's longest context on {} x {} (export: the stacks whose files run that plan)\n",
             headline.cluster.shape.world(), terminal_line(headline.cluster.hardware.name));
  for (const StackAnswer& a : all) {
    if (!a.answer) {
      fmt::print("  {:<11} cannot run it here: {}\n", a.stack, a.refusal->what());
      continue;
    }
    const MaxContextResult& r = *a.answer;
    fmt::print("  {:<11} {:>13} tokens ({:>6})  binds: {}\n", a.stack, format_count(r.max_tokens),
               format_tokens(r.max_tokens), r.binding);
    fmt::print("  {:<11} plan: {}\n", "", describe_knobs(r.plan));
    fmt::print("  {:<11} export: {}\n", "", describe_exports(r.plan));
  }
}

// The plan file of an answer: as `plan -o` writes it (the prediction per phase included).
std::string answer_plan_text(const MaxContextResult& r) { return plan_file_text(with_phase_predictions(evaluate(r.plan))); }

// --stack all's other stacks' plan files beside -o's: PLAN.json -> PLAN.<stack>.json.
std::string stack_plan_path(const std::string& output, const std::string& stack) {
  std::filesystem::path p(output);
  const std::string ext = p.has_extension() ? p.extension().string() : ".json";
  return p.replace_extension().string() + "." + stack + ext;
}

// The paths max-context reads, which -o and the plan files beside it must not name.
std::vector<NamedPath> read_paths(const MaxContextOptions& o) { return cluster_input_paths(o.cluster); }

// The plan files -o asks for: -o's (`plan_file`, opened before the search), and with --stack all
// each other stack's answer beside it, written as one set (common/atomic_folder.h): a name
// that cannot be written leaves every file as it was. Checked before anything is printed.
Result<std::vector<std::string>> write_outputs(const MaxContextOptions& o, const MaxContextResult& headline,
                                               const std::vector<StackAnswer>& others,
                                               std::optional<AtomicFile>& plan_file) {
  if (o.output.empty()) return std::vector<std::string>{};
  // Each name was held apart from the inputs before the search (run_max_context).
  std::vector<std::string> paths = {o.output};
  std::vector<const MaxContextResult*> answers = {&headline};
  std::vector<std::string> stale;  // an earlier set's plans of stacks that give none now
  for (std::size_t i = 1; i < others.size(); ++i) {
    if (!others[i].answer) {
      std::error_code ec;
      if (const std::string path = stack_plan_path(o.output, others[i].stack); std::filesystem::exists(path, ec))
        stale.push_back(path);
      continue;
    }
    paths.push_back(stack_plan_path(o.output, others[i].stack));
    answers.push_back(&*others[i].answer);
  }
  // Left beside the new set, such a plan would be read as this search's answer for its stack
  // (as export refuses an earlier set's files, docs/robustness.md); it is not removed, since it
  // may be the user's.
  if (!stale.empty())
    return Error::bad_input("-o", fmt::format("{} beside '{}' {} a plan of a stack that gives no answer here, which "
                                              "would be read as this search's; remove {} or name another -o",
                                              fmt::join(stale, ", "), o.output, stale.size() == 1 ? "is" : "are",
                                              stale.size() == 1 ? "it" : "them"));
  if (paths.size() == 1) {
    const std::string text = answer_plan_text(headline);
    plan_file->write(text.data(), text.size());
    LONGCTX_TRY(auto w, plan_file->commit());
    (void)w;
    return paths;
  }
  plan_file.reset();  // its temporary removed: the set below writes -o's name with the others'

  // Every name is -o's with the stack's word before the extension: one folder holds them all.
  const std::filesystem::path first(o.output);
  const std::string folder = first.has_parent_path() ? first.parent_path().string() : ".";
  std::map<std::string, std::string> files;
  for (std::size_t i = 0; i < paths.size(); ++i)
    files[std::filesystem::path(paths[i]).filename().string()] = answer_plan_text(*answers[i]);
  LONGCTX_TRY(auto w, write_files_atomically(folder, "-o", files));
  (void)w;
  return paths;
}

int run_max_context(MaxContextOptions o) {
  const bool every_stack = o.cluster.stack == kEveryStack;
  // --stack all's plans are written as one set in -o's folder (write_files_atomically), which
  // replaces regular files only: a stream, a device or a link is refused before the search,
  // not after it (a single plan follows a link: AtomicFile).
  if (every_stack && !o.output.empty()) {
    std::error_code ec;
    const auto target = std::filesystem::status(o.output, ec);  // what the path names, a link followed
    const bool stream = names_standard_output(o.output) ||
                        (std::filesystem::exists(target) && !std::filesystem::is_regular_file(target));
    const bool link = !stream && std::filesystem::is_symlink(std::filesystem::symlink_status(o.output, ec));
    if (stream || link)
      return report_error(Error::bad_input(
          "-o", fmt::format("'{}' {}: --stack {} writes one plan per stack as one set of regular files in -o's "
                            "folder (NAME.json and NAME.<stack>.json beside it); name a file{}",
                            o.output, link ? "is a symbolic link" : "cannot hold one plan per stack", kEveryStack,
                            link ? " there, or the file the link names" : "")));
  }
  // -o is opened (its temporary made beside it) before the search, as `plan` opens it: a path
  // that cannot take the plan file (a missing or read-only folder, a folder, a device) is
  // refused at once, not after a search of seconds or minutes. Left uncommitted (an error, or
  // --stack all writing the set of files instead), the temporary is removed.
  std::optional<AtomicFile> plan_file;
  if (!o.output.empty()) {
    const std::vector<NamedPath> inputs = read_paths(o);
    if (auto apart = check_distinct_output(o.output, "-o", inputs); !apart) return report_error(apart.error());
    auto opened = AtomicFile::open(o.output, "-o");
    if (!opened) return report_error(opened.error());
    plan_file.emplace(std::move(*opened));
    // --stack all's files beside it, whichever stacks answer (the first, longctx's, is -o's).
    if (every_stack)
      for (std::size_t i = 1; i < stack_profiles().size(); ++i)
        if (auto apart = check_distinct_output(stack_plan_path(o.output, stack_profiles()[i]->name), "-o", inputs); !apart)
          return report_error(apart.error());
  }
  // What is searched shows on the progress line below, on a terminal only (docs/cli.md).
  std::vector<StackAnswer> all;
  {
    ProgressLine progress(fmt::format("max-context: {} on {} x {}", o.cluster.model, o.cluster.gpus, o.cluster.gpu));
    if (every_stack) {
      all = answer_max_context_per_stack(o.cluster, !o.no_ladder, [&](std::size_t done, std::size_t total,
                                                                      const std::string& stack) {
        progress.stage(static_cast<int>(done), static_cast<int>(total), "stack " + stack);
      });
    } else {
      auto r = answer_max_context(o.cluster, !o.no_ladder);
      if (!r) return report_error(r.error());
      all.push_back({o.cluster.stack, std::move(*r), std::nullopt});
    }
  }
  if (!all.front().answer) return report_error(*all.front().refusal);
  const MaxContextResult& headline = *all.front().answer;
  // The files first: a path that cannot be written fails the command before its answer prints.
  auto written = write_outputs(o, headline, all, plan_file);
  if (!written) return report_error(written.error());
  if (names_standard_output(o.output)) {
    // -o naming standard output makes the plan file the one document printed there (as `plan`).
  } else if (o.cluster.json) {
    nlohmann::json j = max_context_answer_json(headline);
    if (every_stack) j["stacks"] = stack_answers_json(all);
    fmt::print("{}\n", j.dump(2));
  } else {
    print_answer(headline);
    if (every_stack) print_stack_table(all, headline.plan);
    if (!written->empty()) fmt::print("\nwrote {}\n", fmt::join(*written, ", "));
  }
  return 0;
}

}  // namespace

Command add_max_context_command(CLI::App& app) {
  auto o = std::make_shared<MaxContextOptions>();
  auto* sub = app.add_subcommand(
      "max-context",
      "The longest sequence any allowed plan trains on the cluster, the fastest plan there, the stacks whose files "
      "run it, and the ladder: the maximum as techniques are added one at a time (zero3, +ulysses, +checkpoint, "
      "+offload-checkpoints, +tiled-mlp/tiled-loss, +untied, +ring, then the optimizer and parameter offloads and the "
      "other ZeRO stages). --stack all adds every stack's longest context.");
  add_cluster_options(*sub, o->cluster, /*every_stack=*/true);
  sub->add_flag("--no-ladder", o->no_ladder, "Skip the ladder (faster)");
  sub->add_option("-o,--output", o->output,
                  "Write the answer's plan file (as `plan -o`: `export` and `run` read it); with --stack all each "
                  "other stack's beside it as NAME.<stack>.json");
  return {sub, [o] { return run_max_context(*o); }};
}

}  // namespace longctx::cli
