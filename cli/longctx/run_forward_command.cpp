#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common/commands.h"
#include "cli/longctx/local_launcher.h"
#include "cli/longctx/runtime_exec.h"

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
    // As one rank ends on it: the shell's 128 + the signal, once every rank has cleaned up.
    fmt::print(stderr, "longctx: interrupted by signal {}: every rank got it and was stopped\n", r.interrupted);
    return 128 + r.interrupted;
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
int run_local_ranks(int n, const std::vector<std::string>& args) {
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
            int nproc = 1;
            const auto extras = sub->remaining();
            for (std::size_t i = 0; i < extras.size(); ++i) {
              if (extras[i] == "--nproc" && i + 1 < extras.size()) {
                char* end = nullptr;
                const long v = std::strtol(extras[i + 1].c_str(), &end, 10);
                if (*end != '\0' || v < 1 || v > 1024) {
                  fmt::print(stderr, "longctx: error: --nproc: '{}' is not a rank count from 1 to 1024\n", extras[i + 1]);
                  return 2;
                }
                nproc = static_cast<int>(v);
                ++i;
                continue;
              }
              rest.push_back(extras[i]);
            }
            if (nproc > 1) {
              if (!runtime_available()) return exec_runtime(rest);  // reports the missing runtime
              return gather(nproc, rest);
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
