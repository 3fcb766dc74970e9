#include <algorithm>
#include <csignal>
#include <cstdio>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common/commands.h"
#include "cli/common/error_report.h"
#include "cli/common/parse_values.h"
#include "cli/longctx/local_launcher.h"
#include "cli/longctx/runtime_exec.h"
#include "planner/core/plan.h"
#include "planner/stacks/profile.h"

namespace longctx::cli {
namespace {

// N local ranks of `longctx-runtime ARGS`. Returns the exit status when they did not all
// succeed (the failure reported), else nullopt with their outputs in `r`.
std::optional<int> launch_ranks(int n, const std::vector<std::string>& args, LaunchResult& r) {
  LaunchOptions o;
  o.ranks = n;
  r = launch_local_ranks(runtime_program(), args, o);
  if (!r.error.empty()) {
    fmt::print(stderr, "longctx: error: could not start the ranks: {}\n", r.error);
    return 1;
  }
  if (r.interrupted != 0) {
    // Ended by the signal itself, once every rank has cleaned up, as `run` alone is: a shell
    // sees a job stopped by Ctrl-C (and a script stops), not one that exited by itself.
    fmt::print(stderr, "longctx: interrupted by signal {}: every rank got it and was stopped\n", r.interrupted);
    std::signal(r.interrupted, SIG_DFL);
    std::raise(r.interrupted);
    return 128 + r.interrupted;  // not reached
  }
  if (r.first_failed >= 0) {
    const auto& f = r.ranks[static_cast<std::size_t>(r.first_failed)];
    if (f.stalled)
      fmt::print(stderr, "longctx: error: rank {} of {} stalled: it was stopped (SIGSTOP) for {} s; every rank was "
                 "killed\n", f.rank, n, std::chrono::duration_cast<std::chrono::seconds>(o.stall_timeout).count());
    else
      fmt::print(stderr, "longctx: error: rank {} of {} failed with exit status {}; the other ranks were stopped\n",
                 f.rank, n, f.exit_status);
    if (!f.output.empty()) fmt::print(stderr, "rank {} printed:\n{}", f.rank, f.output);
    return f.exit_status == 2 || f.exit_status == 3 ? f.exit_status : 1;
  }
  return std::nullopt;
}

// `run --nproc N`: the ranks' reports gathered into one.
// The plan's rank count against --nproc, checked once here where it can be: each rank would
// refuse the mismatch alike, naming the plan's cluster, and print it once per rank. A plan
// that cannot be read is left to the ranks, which name it as `run` alone does.
std::optional<Error> nproc_mismatch(int n, const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string path;
    if (args[i] == "--plan" && i + 1 < args.size()) path = args[i + 1];
    else if (args[i].starts_with("--plan=")) path = args[i].substr(7);
    else continue;
    const auto plan = read_plan_file(path);
    // A plan the runtime does not run (another stack's) is refused by the ranks for that first.
    if (!plan || !stack_profile(plan->train.stack.kind).runtime_runs_it) return std::nullopt;
    const std::int64_t world = plan->cluster.shape.world();
    if (world == n) return std::nullopt;
    return Error::bad_input("--nproc", fmt::format("{} ranks for a plan of {} ({} node(s) of {} ranks): give --nproc "
                                                   "{}, or plan for --gpus {}",
                                                   n, world, plan->cluster.shape.nodes, plan->cluster.shape.gpus_per_node,
                                                   world, n));
  }
  return std::nullopt;
}

int run_local_ranks(int n, const std::vector<std::string>& args) {
  if (const auto mismatch = nproc_mismatch(n, args)) return report_error(*mismatch);
  const bool json = std::find(args.begin(), args.end(), "--json") != args.end();
  LaunchResult r;
  if (auto failed = launch_ranks(n, args, r)) return *failed;
  if (!json) {
    for (const auto& rank : r.ranks) fmt::print("[rank {}]\n{}", rank.rank, rank.output);
    return 0;
  }
  // One report: rank 0's steps and prediction (every rank computes the same loss), the
  // largest peaks of any rank, and each rank's report.
  nlohmann::json out = {{"ranks", nlohmann::json::array()}};
  std::int64_t device = 0, host = 0;
  for (const auto& rank : r.ranks) {
    auto j = nlohmann::json::parse(rank.output, nullptr, false);
    if (j.is_discarded()) {
      fmt::print(stderr, "longctx: error: rank {} printed no JSON report\n", rank.rank);
      return 1;
    }
    if (rank.rank == 0)  // what every rank shares: steps, prediction, resume point
      for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "measured") out[it.key()] = it.value();
    if (j.contains("measured")) {
      device = std::max(device, j["measured"].value("peak_device_bytes", std::int64_t{0}));
      host = std::max(host, j["measured"].value("peak_host_bytes", std::int64_t{0}));
    }
    out["ranks"].push_back(std::move(j));
  }
  out["measured"] = {{"peak_device_bytes", device}, {"peak_host_bytes", host}};
  fmt::print("{}\n", out.dump(2));
  return 0;
}

constexpr int kMaxLocalRanks = 1024;

// --nproc N (or --nproc=N) out of the arguments, once, held to the rule every whole-number
// flag follows (cli/common/parse_values.h); the other arguments are appended to `rest`.
Result<int> take_nproc(const std::vector<std::string>& args, std::vector<std::string>& rest) {
  std::optional<std::string> given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::optional<std::string> value;
    if (args[i] == "--nproc") {
      if (i + 1 == args.size())
        return Error::bad_input("--nproc", fmt::format("needs a value: a rank count from 1 to {}", kMaxLocalRanks));
      value = args[++i];
    } else if (args[i].starts_with("--nproc=")) {
      value = args[i].substr(8);
    } else {
      rest.push_back(args[i]);
      continue;
    }
    if (given) return Error::bad_input("--nproc", "given more than once; give it once");
    given = value;
  }
  if (!given) return 1;
  if (std::string why = value_rules::whole_number(*given); !why.empty()) return Error::bad_input("--nproc", why);
  const long long n = std::stoll(*given);
  if (n < 1 || n > kMaxLocalRanks)
    return Error::bad_input("--nproc", fmt::format("{} is not a rank count from 1 to {}", n, kMaxLocalRanks));
  return static_cast<int>(n);
}

// `longctx NAME ...` handed to `longctx-runtime NAME ...`; `--nproc N` starts N local
// ranks of it, whose outputs `gather` turns into one.
Command add_forwarded_command(CLI::App& app, const std::string& name, const std::string& help,
                              std::function<int(int, const std::vector<std::string>&)> gather) {
  auto* sub = app.add_subcommand(name, help);
  sub->set_help_flag();  // longctx-runtime answers --help with the real options
  sub->allow_extras();
  sub->prefix_command();
  return {sub, [sub, name, gather] {
            std::vector<std::string> rest = {name};
            const auto extras = sub->remaining();
            const auto nproc = take_nproc(extras, rest);
            if (!nproc) return report_error(nproc.error());
            // The runtime's own --help, and the launcher's one option beside it.
            if (std::find(rest.begin(), rest.end(), "--help") != rest.end() ||
                std::find(rest.begin(), rest.end(), "-h") != rest.end()) {
              fmt::print("longctx {} --nproc N: start N local ranks of it (1 to {}) with torchrun's environment, "
                         "their reports gathered into one\n\n",
                         name, kMaxLocalRanks);
              std::fflush(stdout);
              return exec_runtime(rest);
            }
            if (*nproc > 1) {
              if (!runtime_available()) return exec_runtime(rest);  // reports the missing runtime
              return gather(*nproc, rest);
            }
            return exec_runtime(rest);
          }};
}

// `calibrate --nproc N`: rank 0 writes or prints the preset; the others print nothing.
int calibrate_local_ranks(int n, const std::vector<std::string>& args) {
  LaunchResult r;
  if (auto failed = launch_ranks(n, args, r)) return *failed;
  fmt::print("{}", r.ranks.front().output);
  return 0;
}

}  // namespace

Command add_run_forward_command(CLI::App& app) {
  return add_forwarded_command(app, "run",
                               "Run a plan file as real LibTorch training steps and show measured beside predicted "
                               "memory; --nproc N starts N local ranks (`longctx run --help` for every option)",
                               run_local_ranks);
}

Command add_calibrate_forward_command(CLI::App& app) {
  return add_forwarded_command(app, "calibrate",
                               "Measure this machine with the runtime's own kernels and write a hardware preset for "
                               "--gpu FILE; --nproc N measures collectives across N local ranks (`longctx calibrate "
                               "--help` for every option)",
                               calibrate_local_ranks);
}

}  // namespace longctx::cli
