// longctx run: executes a plan file as real training steps and shows measured beside
// predicted memory. Parse (the flags into the plan and the runtime's options), check (the
// runtime's runnable() owns every refusal), execute (run_plan, with progress), report
// (run_report.h).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/common/commands.h"
#include "cli/common/error_report.h"
#include "cli/common/parse_values.h"
#include "cli/runtime/run_outputs.h"
#include "cli/runtime/run_report.h"
#include "planner/core/knobs.h"
#include "planner/core/plan.h"
#include "planner/core/units.h"
#include "planner/io/prediction_drift.h"
#include "planner/io/quoted_text.h"
#include "longctx/runtime/prediction.h"
#include "longctx/runtime/process_group.h"
#include "longctx/runtime/runner.h"
#include "longctx/runtime/trace.h"

namespace longctx::cli {

namespace {

struct RunArgs {
  std::string plan_path;
  int steps = 1;
  std::string device = "cpu";
  std::string trace_path;
  bool json = false;
  std::string seed_text = "0";  // parse_seed's: CLI11 would wrap -1 round to 2^64-1
  std::string data_path;
  int threads = 0;
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool checkpoint_every_given = false;
  bool keep_given = false;
  int keep = 2;
  bool resume = false;
  std::string allocation_log;
  std::string op_times;
  bool force = false;
};


// --seed as written: a whole number from 0 to 2^64-1, nothing else (no sign, no wrap).
Result<std::uint64_t> parse_seed(const std::string& text) {
  const auto bad = [&] {
    return Error::bad_input("--seed", fmt::format("'{}' is not a seed; give a whole number from 0 to {}", text,
                                                  std::numeric_limits<std::uint64_t>::max()));
  };
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) return bad();
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return bad();
  return static_cast<std::uint64_t>(v);
}

// The runtime's options the flags give (the output files apart: RunOutputs).
Result<runtime::RunOptions> parse_options(const RunArgs& a) {
  runtime::RunOptions o;
  LONGCTX_TRY(o.seed, parse_seed(a.seed_text));
  o.steps = a.steps;
  o.device = a.device;
  o.data_path = a.data_path;
  o.threads = a.threads;
  o.checkpoint.dir = a.checkpoint_dir;
  if (a.checkpoint_every_given) o.checkpoint.every = a.checkpoint_every;
  o.checkpoint.keep = a.keep;
  o.checkpoint.keep_given = a.keep_given;
  o.checkpoint.resume = a.resume;
  o.checkpoint.log = stderr;
  o.refuse_beyond_host_memory = !a.force;
  // The report keeps the last step's phases (the table) and, for a trace, every step's;
  // --json's per-step lines are kept apart, a few numbers each. Without either, a run's
  // memory does not grow with its length.
  o.keep_steps = a.trace_path.empty() ? 1 : 0;
  return o;
}

// The knobs away from their plain values, or "plain step".
std::string describe_or_plain(const Plan& p) {
  const std::string s = describe_knobs(p, /*all_rows=*/false);
  return s.empty() ? "plain step" : s;
}

// The steps run, a progress line each (to stderr under --json, whose lines are kept).
Result<runtime::RunReport> execute(const Plan& plan, const runtime::RunOptions& o, const RunArgs& a,
                                   std::vector<StepLine>& lines) {
  std::FILE* progress = a.json ? stderr : stdout;
  fmt::print(progress, "longctx run: {} at seq {} x micro-batch {}, {} on {}; {}\n", terminal_line(plan.model.name), plan.train.seq,
             plan.train.micro_batch, to_string(plan.train.dtype), a.device, describe_or_plain(plan));
  return runtime::run_plan(plan, o, [&](int i, const runtime::StepResult& s) {
    fmt::print(progress, "step {}/{}  loss {:.4f}  {:.3f} s  peak device {}  host {}\n", i + 1, a.steps, s.loss, s.time_s,
               format_bytes(s.peak_device), format_bytes(s.peak_host));
    std::fflush(progress);
    if (a.json) lines.push_back({s.step, s.loss, s.time_s, s.peak_device, s.peak_host});
  });
}

// The files written and the comparison shown. REQUIRES: the run has at least one step.
Result<bool> report(RunOutputs& outputs, const RunComparison& c, const RunArgs& a, const std::vector<StepLine>& lines) {
  if (outputs.writes_trace())
    if (auto r = outputs.write_trace(runtime::chrome_trace_json(c.run, trace_identity(c.plan))); !r) return r;
  if (outputs.times_ops())
    if (auto r = outputs.write_op_times(op_times_json(c.run.steps.back(), c.predicted).dump(1)); !r) return r;
  if (a.json)
    print_run_json(c, lines);
  else
    print_run_table(c, outputs.trace_path());
  return true;
}

int run(const RunArgs& a) {
  auto options = parse_options(a);
  if (!options) return report_error(options.error());
  auto plan = read_plan_file(a.plan_path);
  if (!plan) return report_error(plan.error());
  if (auto r = runtime::runnable(*plan, *options); !r) return report_error(r.error());
  options->refuse_beyond_host_memory = false;  // checked: run_plan's own check need not predict the step again
  // The ranks as the launcher set them (runnable() refused malformed ones): every rank holds
  // every rank's outputs apart, and opens its own.
  auto env = runtime::rank_env_from_environment();
  if (!env) return report_error(env.error());
  if (auto r = check_run_files({a.plan_path, a.data_path, a.trace_path, a.op_times, a.allocation_log, a.json}, env->world_size); !r)
    return report_error(r.error());
  auto outputs = RunOutputs::open(a.trace_path, a.op_times, a.allocation_log, env->rank);
  if (!outputs) return report_error(outputs.error());
  options->time_ops = outputs->times_ops();
  options->allocation_log = outputs->allocation_log();
  const auto predicted = runtime::predict_step(*plan);
  const auto drift = prediction_differences(plan->prediction, predicted.totals);
  fmt::print(stderr, "{}", drift_note(drift));
  std::vector<StepLine> lines;
  auto measured = execute(*plan, *options, a, lines);
  if (auto r = outputs->finish_log(); !r) return report_error(r.error());
  if (!measured) return report_error(measured.error());
  if (auto r = report(*outputs, RunComparison{*plan, *measured, predicted, drift}, a, lines); !r) return report_error(r.error());
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Run a plan as real training steps and show measured beside predicted memory");
  sub->add_option("--plan", args->plan_path, "The plan file (longctx plan -o plan.json)")->required();
  sub->add_option("--steps", args->steps, "Training steps to run (at least 1)")
      ->check(CLI::Validator(
          [](std::string& v) {
            const auto n = value_rules::whole_number_or_defer(v);
            return !n || (*n >= 1 && *n <= std::numeric_limits<int>::max())
                       ? std::string()
                       : fmt::format("{} is not a step count; run at least 1 step, at most {}", v,
                                     std::numeric_limits<int>::max());
          },
          "N >= 1"));
  sub->add_option("--device", args->device, "cpu (the virtual device, which enforces the plan's budgets) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--trace", args->trace_path, "Write a Chrome trace (Perfetto) of phases and memory to FILE (rank R > 0 of several: FILE with .rankR before the extension)");
  sub->add_flag("--json", args->json, "Print the result as JSON (progress goes to stderr)");
  sub->add_option("--seed", args->seed_text, "Seed of the weights and the synthetic tokens (0 to 2^64-1)");
  sub->add_option("--data", args->data_path, "A file of little-endian uint32 token ids instead of synthetic tokens");
  sub->add_option("--threads", args->threads, "LibTorch intra-op threads (default: the plan's on the CPU virtual device, which its prediction counts; "
                  "LibTorch's on CUDA)")
      ->check(CLI::Validator(
          [](std::string& v) {
            const auto n = value_rules::whole_number_or_defer(v);
            return !n || (*n >= 0 && *n <= 4096)
                       ? std::string()
                       : fmt::format("{} is not a thread count; give 1 to 4096, or 0 for the default", v);
          },
          "0..4096"));
  sub->add_flag("--force", args->force,
                "Run even when the plan needs more host memory than the machine has available (MemAvailable)");
  sub->add_option("--allocation-log", args->allocation_log,
                  "Write every counted allocation and free (phase, pool, bytes, bytes in use) to FILE; on CUDA every "
                  "block the caching allocator hands out and takes back, with its stream and address (rank R > 0 of "
                  "several: FILE with .rankR before the extension)");
  sub->add_option("--op-times", args->op_times,
                  "Time every LibTorch operator of each phase and write the last step's tallies (calls, self time) "
                  "beside each phase's measured and predicted time to FILE as JSON (rank R > 0 of several: FILE with "
                  ".rankR before the extension); the timing costs about a microsecond an operator");
  sub->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "Save the training state into DIR (DIR/step-N/); with --resume, go on from its newest checkpoint");
  auto* every = sub->add_option("--checkpoint-every", args->checkpoint_every, "Save the training state after every N-th step");
  auto* keep = sub->add_option("--keep", args->keep, "Checkpoints to keep in --checkpoint-dir (default 2); older ones are deleted");
  sub->add_flag("--resume", args->resume,
                "Go on from the newest checkpoint in --checkpoint-dir (from scratch if it has none); --steps counts "
                "the whole run");
  return {sub, [args, every, keep] {
            args->checkpoint_every_given = every->count() > 0;
            args->keep_given = keep->count() > 0;
            return run(*args);
          }};
}

}  // namespace longctx::cli
