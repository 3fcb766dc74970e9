// longctx run: executes a plan file as real training steps and shows measured beside
// predicted memory.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "longctx/planner/knobs.h"
#include "longctx/planner/plan.h"
#include "longctx/planner/prediction_drift.h"
#include "longctx/planner/units.h"
#include "longctx/runtime/prediction.h"
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
  std::uint64_t seed = 0;
  std::string data_path;
  int threads = 0;
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool checkpoint_every_given = false;
  int keep = 2;
  bool resume = false;
  std::string allocation_log;
};

int fail(const Error& e) {
  fmt::print(stderr, "error: {}\n", e.what());
  return exit_status(e.kind);
}

std::string percent(std::int64_t measured, std::int64_t predicted) {
  if (predicted == 0) return measured == 0 ? "0.0%" : "n/a";
  return fmt::format("{:+.1f}%", 100.0 * double(measured - predicted) / double(predicted));
}

// The knobs away from their plain values, or "plain step".
std::string describe_or_plain(const Plan& p) {
  const std::string s = describe_knobs(p, /*all_rows=*/false);
  return s.empty() ? "plain step" : s;
}

int run(const RunArgs& a) {
  auto plan = read_plan_file(a.plan_path);
  if (!plan) return fail(plan.error());
  runtime::RunOptions o;
  o.steps = a.steps;
  o.device = a.device;
  o.seed = a.seed;
  o.data_path = a.data_path;
  o.threads = a.threads;
  o.checkpoint.dir = a.checkpoint_dir;
  if (a.checkpoint_every_given) o.checkpoint.every = a.checkpoint_every;
  o.checkpoint.keep = a.keep;
  o.checkpoint.resume = a.resume;
  o.checkpoint.log = stderr;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log(nullptr, &std::fclose);
  if (!a.allocation_log.empty()) {
    log.reset(std::fopen(a.allocation_log.c_str(), "w"));
    if (!log) return fail(Error::bad_input("--allocation-log", fmt::format("cannot write {}", a.allocation_log)));
    o.allocation_log = log.get();
  }
  if (auto r = runtime::runnable(*plan, o); !r) return fail(r.error());
  const auto predicted = runtime::predict_step(*plan);
  const auto drift = prediction_differences(plan->prediction, predicted.totals);
  fmt::print(stderr, "{}", drift_note(drift));

  std::FILE* progress = a.json ? stderr : stdout;
  fmt::print(progress, "longctx run: {} at seq {} x micro-batch {}, {} on {}; {}\n", plan->model.name, plan->train.seq,
             plan->train.micro_batch, to_string(plan->train.dtype), a.device, describe_or_plain(*plan));
  auto report = runtime::run_plan(*plan, o, [&](int i, const runtime::StepResult& s) {
    fmt::print(progress, "step {}/{}  loss {:.4f}  {:.3f} s  peak device {}  host {}\n", i + 1, a.steps, s.loss, s.time_s,
               format_bytes(s.peak_device), format_bytes(s.peak_host));
    std::fflush(progress);
  });
  if (!report) return fail(report.error());

  // Rank 0 writes FILE; rank R of several writes FILE with ".rankR" before its extension.
  std::string trace_path = a.trace_path;
  if (const char* rank = std::getenv("RANK"); rank && *rank && std::string(rank) != "0" && !trace_path.empty()) {
    const auto dot = trace_path.rfind('.');
    const bool ext = dot != std::string::npos && trace_path.find('/', dot) == std::string::npos;
    trace_path = ext ? trace_path.substr(0, dot) + ".rank" + rank + trace_path.substr(dot) : trace_path + ".rank" + rank;
  }
  if (!trace_path.empty()) {
    std::ofstream out(trace_path);
    out << runtime::chrome_trace_json(*report);
    if (!out) return fail(Error::bad_input("--trace", fmt::format("cannot write {}", trace_path)));
  }

  const auto& last = report->steps.back();
  std::string measured_at;
  std::int64_t best = -1;
  for (const auto& p : last.phases)
    if (p.peak_device > best) best = p.peak_device, measured_at = p.name;

  if (a.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : report->steps)
      steps.push_back({{"step", s.step},
                       {"loss", s.loss},
                       {"time_s", s.time_s},
                       {"peak_device_bytes", s.peak_device},
                       {"peak_host_bytes", s.peak_host}});
    nlohmann::json phases = nlohmann::json::array();
    for (const auto& p : last.phases) {
      nlohmann::json ph = {{"name", p.name},
                           {"peak_device_bytes", p.peak_device},
                           {"peak_host_bytes", p.peak_host},
                           {"time_s", p.end_s - p.start_s}};
      if (auto it = predicted.phases.find(p.name); it != predicted.phases.end())
        ph["predicted_peak_device_bytes"] = it->second.peak_device_bytes;
      phases.push_back(ph);
    }
    nlohmann::json j = {
        {"steps", steps},
        {"measured",
         {{"peak_device_bytes", report->peak_device},
          {"peak_host_bytes", report->peak_host},
          {"peak_device_reserved_bytes", report->peak_device_reserved},
          {"persistent_device_bytes", report->persistent_device},
          {"persistent_host_bytes", report->persistent_host},
          {"peak_at", measured_at},
          {"phases", phases}}},
        {"predicted",
         {{"peak_device_bytes", predicted.totals.peak_device_bytes},
          {"peak_host_bytes", predicted.totals.peak_host_bytes},
          {"peak_at", predicted.totals.peak_at},
          {"step_time_s", predicted.totals.step_time_s}}},
        {"plan_prediction",
         {{"peak_device_bytes", plan->prediction.peak_device_bytes},
          {"peak_host_bytes", plan->prediction.peak_host_bytes}}},
        {"prediction_drift", drift_json(drift)},
        {"device", report->device},
        {"resumed_after_step", report->resumed_after}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  fmt::print("\n{:<22} {:>14} {:>14} {:>8}\n", "", "measured", "predicted", "error");
  fmt::print("{:<22} {:>14} {:>14} {:>8}\n", "peak device", format_bytes(report->peak_device),
             format_bytes(predicted.totals.peak_device_bytes),
             percent(report->peak_device, predicted.totals.peak_device_bytes));
  fmt::print("{:<22} {:>14} {:>14} {:>8}\n", "peak host", format_bytes(report->peak_host),
             format_bytes(predicted.totals.peak_host_bytes), percent(report->peak_host, predicted.totals.peak_host_bytes));
  fmt::print("{:<22} {:>14} {:>14}\n", "peak at", measured_at, predicted.totals.peak_at);
  fmt::print("\nper phase, last step   {:>14} {:>14} {:>8} {:>10}\n", "device peak", "predicted", "error", "time");
  for (const auto& p : last.phases) {
    auto it = predicted.phases.find(p.name);
    const std::int64_t pred = it == predicted.phases.end() ? 0 : it->second.peak_device_bytes;
    fmt::print("  {:<20} {:>14} {:>14} {:>8} {:>8.1f} ms\n", p.name, format_bytes(p.peak_device),
               it == predicted.phases.end() ? "-" : format_bytes(pred),
               it == predicted.phases.end() ? "" : percent(p.peak_device, pred), 1e3 * (p.end_s - p.start_s));
  }
  if (!trace_path.empty()) fmt::print("\ntrace: {} (open in https://ui.perfetto.dev)\n", trace_path);
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Run a plan as real training steps and show measured beside predicted memory");
  sub->add_option("--plan", args->plan_path, "The plan file (longctx plan -o plan.json)")->required();
  sub->add_option("--steps", args->steps, "Training steps to run")->check(CLI::PositiveNumber);
  sub->add_option("--device", args->device, "cpu (the virtual device, which enforces the plan's budgets) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--trace", args->trace_path, "Write a Chrome trace (Perfetto) of phases and memory to FILE (rank R > 0 of several: FILE with .rankR before the extension)");
  sub->add_flag("--json", args->json, "Print the result as JSON (progress goes to stderr)");
  sub->add_option("--seed", args->seed, "Seed of the weights and the synthetic tokens");
  sub->add_option("--data", args->data_path, "A file of little-endian uint32 token ids instead of synthetic tokens");
  sub->add_option("--threads", args->threads, "LibTorch intra-op threads (default: the plan's on the CPU virtual device, which its prediction counts; "
                  "LibTorch's on CUDA)");
  sub->add_option("--allocation-log", args->allocation_log,
                  "Write every counted allocation and free (phase, pool, bytes, bytes in use) to FILE (CPU)");
  sub->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "Save the training state into DIR (DIR/step-N/); with --resume, go on from its newest checkpoint");
  auto* every = sub->add_option("--checkpoint-every", args->checkpoint_every, "Save the training state after every N-th step");
  sub->add_option("--keep", args->keep, "Checkpoints to keep in --checkpoint-dir (default 2); older ones are deleted");
  sub->add_flag("--resume", args->resume,
                "Go on from the newest checkpoint in --checkpoint-dir (from scratch if it has none); --steps counts "
                "the whole run");
  return {sub, [args, every] {
            args->checkpoint_every_given = every->count() > 0;
            return run(*args);
          }};
}

}  // namespace longctx::cli
