// longctx run: executes a plan file as real training steps and shows measured beside
// predicted memory.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common/commands.h"
#include "common/atomic_file.h"
#include "planner/core/knobs.h"
#include "planner/core/plan.h"
#include "planner/io/prediction_drift.h"
#include "planner/core/units.h"
#include "planner/stacks/profile.h"
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
  std::string seed_text = "0";  // parse_seed's: CLI11 would wrap -1 round to 2^64-1
  std::string data_path;
  int threads = 0;
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool checkpoint_every_given = false;
  int keep = 2;
  bool resume = false;
  std::string allocation_log;
  std::string op_times;
  bool force = false;
};

int fail(const Error& e) {
  fmt::print(stderr, "error: {}\n", e.what());
  return exit_status(e.kind);
}

std::string percent(std::int64_t measured, std::int64_t predicted) {
  if (predicted == 0) return measured == 0 ? "0.0%" : "n/a";
  return fmt::format("{:+.1f}%", 100.0 * double(measured - predicted) / double(predicted));
}

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

// MemAvailable from /proc/meminfo, in bytes: what the kernel can give without swapping.
std::optional<std::int64_t> available_memory() {
  auto text = read_regular_file("/proc/meminfo", "/proc/meminfo");
  if (!text) return std::nullopt;
  const auto at = text->find("MemAvailable:");
  if (at == std::string::npos) return std::nullopt;
  long long kib = 0;
  if (std::sscanf(text->c_str() + at, "MemAvailable: %lld kB", &kib) != 1) return std::nullopt;
  return static_cast<std::int64_t>(kib) * 1024;
}

// The host memory the ranks on this machine will use (the plan's host figure; on the CPU
// virtual device its device memory is host memory too) against what the machine has free.
// Exit 3 (it does not fit) unless forced; the kernel's OOM killer would otherwise end the
// run part way.
Result<bool> check_host_memory(const runtime::PredictedStep& predicted, const std::string& device, bool force) {
  const auto available = available_memory();
  if (!available || force) return true;
  std::int64_t local_ranks = 1;
  if (const char* n = std::getenv("LOCAL_WORLD_SIZE"); n && std::atoll(n) > 0) local_ranks = std::atoll(n);
  const std::int64_t per_rank =
      predicted.totals.peak_host_bytes + (device == "cpu" ? predicted.totals.peak_device_bytes : 0);
  const std::int64_t needed = per_rank * local_ranks;
  if (needed <= *available) return true;
  return Error{ErrorKind::NoFit, "--plan",
               fmt::format("the plan needs {} of host memory on this machine ({} rank{} x {}{}), and only {} is available "
                           "(MemAvailable); plan for a smaller --host-mem or budget, free memory, or pass --force to "
                           "run anyway",
                           format_bytes(needed), local_ranks, local_ranks == 1 ? "" : "s", format_bytes(per_rank),
                           device == "cpu" ? ", the CPU virtual device's memory included" : "",
                           format_bytes(*available))};
}

// Rank 0 writes FILE; rank R of several writes FILE with ".rankR" before its extension.
std::string rank_trace_path(const std::string& path) {
  const char* rank = std::getenv("RANK");
  if (path.empty() || !rank || !*rank || std::string(rank) == "0") return path;
  const auto dot = path.rfind('.');
  const bool ext = dot != std::string::npos && path.find('/', dot) == std::string::npos;
  return ext ? path.substr(0, dot) + ".rank" + rank + path.substr(dot) : path + ".rank" + rank;
}

// One step of --json's "steps".
struct StepLine {
  int step;
  double loss, time_s;
  std::int64_t peak_device, peak_host;
};

// The knobs away from their plain values, or "plain step".
std::string describe_or_plain(const Plan& p) {
  const std::string s = describe_knobs(p, /*all_rows=*/false);
  return s.empty() ? "plain step" : s;
}

// An output file a flag names, opened before the run so that a path that cannot be written
// fails at once, not after it; none where the path is empty.
Result<std::optional<AtomicFile>> open_output(const std::string& path, const std::string& flag) {
  if (path.empty()) return std::optional<AtomicFile>();
  auto f = AtomicFile::open(path, flag);
  if (!f) return f.error();
  return std::optional<AtomicFile>(std::move(*f));
}

// `text` as the whole of `file`, put in place under its name (a failed write: commit's error).
Result<bool> write_whole(AtomicFile& file, const std::string& text) {
  file.write(text.data(), text.size());
  return file.commit();
}

// --op-times: the last step's phases, each with its measured and predicted time and its
// LibTorch operators by self time, longest first.
nlohmann::json op_times_json(const runtime::StepResult& step, const runtime::PredictedStep& predicted) {
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : step.phases) {
    std::vector<std::pair<std::string, runtime::OpTally>> ops(p.ops.begin(), p.ops.end());
    std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.self_s > b.second.self_s; });
    nlohmann::json list = nlohmann::json::array();
    std::int64_t calls = 0;
    for (const auto& [name, t] : ops) {
      list.push_back({{"op", name}, {"calls", t.calls}, {"self_s", t.self_s}});
      calls += t.calls;
    }
    const auto it = predicted.phases.find(p.name);
    const bool known = it != predicted.phases.end();
    nlohmann::json predicted_ops = nlohmann::json::array();
    std::int64_t launches = 0;
    if (known)
      for (const OpTime& t : it->second.ops) {
        predicted_ops.push_back(
            {{"op", t.op}, {"compute_s", t.compute_s}, {"comm_s", t.comm_s}, {"launches", t.launches}, {"bound", t.bound}});
        launches += t.launches;
      }
    phases.push_back({{"phase", p.name},
                      {"time_s", p.end_s - p.start_s},
                      {"predicted_time_s", known ? nlohmann::json(it->second.time_s) : nlohmann::json(nullptr)},
                      {"calls", calls},
                      {"predicted_launches", launches},
                      {"ops", list},
                      {"predicted_ops", predicted_ops}});
  }
  return {{"step", step.step}, {"time_s", step.time_s}, {"phases", phases}};
}

// Only the stacks whose profile says so are longctx's runtime's to execute.
Result<bool> runtime_runs(const Plan& p) {
  if (stack_profile(p.train.stack.kind).runtime_runs_it) return true;
  return Error::bad_input("train.stack", fmt::format("the plan predicts the {} stack, which longctx's runtime does not "
                                                     "execute; train it with that stack (longctx export) and hold the "
                                                     "run to the plan with longctx compare, or re-plan with --stack {}",
                                                     to_string(p.train.stack.kind), stack_profiles().front()->name));
}

int run(const RunArgs& a) {
  auto seed = parse_seed(a.seed_text);
  if (!seed) return fail(seed.error());
  auto plan = read_plan_file(a.plan_path);
  if (!plan) return fail(plan.error());
  if (auto r = runtime_runs(*plan); !r) return fail(r.error());
  runtime::RunOptions o;
  o.steps = a.steps;
  o.device = a.device;
  o.seed = *seed;
  o.data_path = a.data_path;
  o.threads = a.threads;
  o.checkpoint.dir = a.checkpoint_dir;
  if (a.checkpoint_every_given) o.checkpoint.every = a.checkpoint_every;
  o.checkpoint.keep = a.keep;
  o.checkpoint.resume = a.resume;
  o.checkpoint.log = stderr;
  // Opened before the run, so a path that cannot be written fails at once, not after it.
  const std::string trace_path = rank_trace_path(a.trace_path);
  auto trace = open_output(trace_path, "--trace");
  if (!trace) return fail(trace.error());
  auto op_times = open_output(rank_trace_path(a.op_times), "--op-times");
  if (!op_times) return fail(op_times.error());
  o.time_ops = op_times->has_value();
  // The log goes to a temporary and is put in place once the run ends (one that failed
  // too: the log is then the record of what was allocated up to the failure).
  std::optional<AtomicFile> log_file;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log(nullptr, &std::fclose);
  if (!a.allocation_log.empty()) {
    auto f = AtomicFile::open(a.allocation_log, "--allocation-log");
    if (!f) return fail(f.error());
    log_file.emplace(std::move(*f));
    log.reset(::fdopen(::dup(log_file->fd()), "w"));
    if (!log) return fail(Error{ErrorKind::Internal, "--allocation-log", std::strerror(errno)});
    o.allocation_log = log.get();
  }
  const auto finish_log = [&]() -> Result<bool> {
    if (!log_file) return true;
    if (std::fflush(log.get()) != 0 || std::ferror(log.get())) log_file->fail(errno != 0 ? errno : EIO);
    log.reset();
    return log_file->commit();
  };
  if (auto r = runtime::runnable(*plan, o); !r) return fail(r.error());
  const auto predicted = runtime::predict_step(*plan);
  if (auto r = check_host_memory(predicted, a.device, a.force); !r) return fail(r.error());
  const auto drift = prediction_differences(plan->prediction, predicted.totals);
  fmt::print(stderr, "{}", drift_note(drift));

  std::FILE* progress = a.json ? stderr : stdout;
  fmt::print(progress, "longctx run: {} at seq {} x micro-batch {}, {} on {}; {}\n", plan->model.name, plan->train.seq,
             plan->train.micro_batch, to_string(plan->train.dtype), a.device, describe_or_plain(*plan));
  // The report keeps the last step's phases (the table below) and, for a trace, every
  // step's; --json's per-step lines are kept here, a few numbers each. Without either, a
  // run's memory does not grow with its length.
  o.keep_steps = a.trace_path.empty() ? 1 : 0;
  std::vector<StepLine> lines;
  auto report = runtime::run_plan(*plan, o, [&](int i, const runtime::StepResult& s) {
    fmt::print(progress, "step {}/{}  loss {:.4f}  {:.3f} s  peak device {}  host {}\n", i + 1, a.steps, s.loss, s.time_s,
               format_bytes(s.peak_device), format_bytes(s.peak_host));
    std::fflush(progress);
    if (a.json) lines.push_back({s.step, s.loss, s.time_s, s.peak_device, s.peak_host});
  });
  if (auto r = finish_log(); !r) return fail(r.error());
  if (!report) return fail(report.error());

  if (*trace)
    if (auto r = write_whole(**trace, runtime::chrome_trace_json(*report, trace_identity(*plan))); !r) return fail(r.error());

  const auto& last = report->steps.back();
  if (*op_times)
    if (auto r = write_whole(**op_times, op_times_json(last, predicted).dump(1)); !r) return fail(r.error());
  std::string measured_at;
  std::int64_t best = -1;
  for (const auto& p : last.phases)
    if (p.peak_device > best) best = p.peak_device, measured_at = p.name;

  if (a.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : lines)
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
                           {"time_s", p.end_s - p.start_s},
                           {"collectives", p.collectives}};
      if (auto it = predicted.phases.find(p.name); it != predicted.phases.end()) {
        ph["predicted_peak_device_bytes"] = it->second.peak_device_bytes;
        ph["predicted_time_s"] = it->second.time_s;
        ph["predicted_collectives"] = it->second.collectives;
      }
      phases.push_back(ph);
    }
    nlohmann::json j = {
        {"steps", steps},
        {"measured",
         {{"peak_device_bytes", report->peak_device},
          {"peak_host_bytes", report->peak_host},
          {"peak_device_reserved_bytes", report->peak_device_reserved},
          {"device_in_use_driver_bytes", report->device_in_use_driver},
          {"persistent_device_bytes", report->persistent_device},
          {"persistent_host_bytes", report->persistent_host},
          {"peak_at", measured_at},
          {"phases", phases}}},
        {"predicted",
         {{"peak_device_bytes", predicted.totals.peak_device_bytes},
          {"peak_host_bytes", predicted.totals.peak_host_bytes},  // per node, as the plan's
          {"peak_host_bytes_per_rank", predicted.totals.peak_host_bytes / plan->cluster.shape.gpus_per_node},
          {"peak_at", predicted.totals.peak_at},
          {"step_time_s", predicted.totals.step_time_s}}},
        {"plan_prediction",
         {{"peak_device_bytes", plan->prediction.peak_device_bytes},
          {"peak_reserved_bytes", plan->prediction.peak_reserved_bytes},
          {"peak_nvidia_smi_bytes", plan->prediction.peak_nvidia_smi_bytes},
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
  // The plan's host figure is per node (memory_model.cpp: per rank x GPUs per node); this
  // process measured one rank's.
  const std::int64_t host_per_rank = predicted.totals.peak_host_bytes / plan->cluster.shape.gpus_per_node;
  fmt::print("{:<22} {:>14} {:>14} {:>8}\n", "peak host (per rank)", format_bytes(report->peak_host),
             format_bytes(host_per_rank), percent(report->peak_host, host_per_rank));
  fmt::print("{:<22} {:>14} {:>14}\n", "peak at", measured_at, predicted.totals.peak_at);
  fmt::print("\nper phase, last step   {:>14} {:>14} {:>8} {:>11} {:>11}\n", "device peak", "predicted", "error", "time",
             "predicted");
  for (const auto& p : last.phases) {
    auto it = predicted.phases.find(p.name);
    const std::int64_t pred = it == predicted.phases.end() ? 0 : it->second.peak_device_bytes;
    const std::string pred_time = it == predicted.phases.end() ? "-" : fmt::format("{:.1f} ms", 1e3 * it->second.time_s);
    fmt::print("  {:<20} {:>14} {:>14} {:>8} {:>8.1f} ms {:>11}\n", p.name, format_bytes(p.peak_device),
               it == predicted.phases.end() ? "-" : format_bytes(pred),
               it == predicted.phases.end() ? "" : percent(p.peak_device, pred), 1e3 * (p.end_s - p.start_s), pred_time);
  }
  if (!trace_path.empty()) fmt::print("\ntrace: {} (open in https://ui.perfetto.dev)\n", trace_path);
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
            const long long n = std::atoll(v.c_str());
            return n >= 1 ? std::string() : fmt::format("{} is not a step count; run at least 1 step", v);
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
            const long long n = std::atoll(v.c_str());
            return n >= 0 && n <= 4096 ? std::string()
                                       : fmt::format("{} is not a thread count; give 1 to 4096, or 0 for the default", v);
          },
          "0..4096"));
  sub->add_flag("--force", args->force,
                "Run even when the plan needs more host memory than the machine has available (MemAvailable)");
  sub->add_option("--allocation-log", args->allocation_log,
                  "Write every counted allocation and free (phase, pool, bytes, bytes in use) to FILE; on CUDA every "
                  "block the caching allocator hands out and takes back, with its stream and address");
  sub->add_option("--op-times", args->op_times,
                  "Time every LibTorch operator of each phase and write the last step's tallies (calls, self time) "
                  "beside each phase's measured and predicted time to FILE as JSON (rank R > 0 of several: FILE with "
                  ".rankR before the extension); the timing costs about a microsecond an operator");
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
