#pragma once
// Starts N local ranks of a program with the torchrun environment (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), collects each rank's standard
// output, and leaves no rank behind: when one fails, the others are stopped (SIGTERM, then
// SIGKILL after a grace period) and the failing rank is reported. A rank stopped (SIGSTOP,
// or stopped by a debugger) for longer than the stall timeout counts as failed: it is
// named as the stalled rank and every rank is killed, instead of the survivors timing out
// in a collective and being blamed for it. SIGINT, SIGTERM or SIGHUP to the launcher (a
// terminal's Ctrl-C reaches only it: each rank runs in a process group of its own) is passed
// to every rank, which cleans up as it does on its own (runtime: no temporary left behind),
// and SIGKILL follows after the grace period; one the launcher was started ignoring is left
// ignored, by it and its ranks.
#include <chrono>
#include <string>
#include <vector>

namespace longctx::cli {

struct RankOutcome {
  int rank = 0;
  int exit_status = -1;     // the rank's exit status; 128 + signal when a signal ended it
  bool stopped = false;     // ended by the launcher after another rank failed, or after an interrupt
  bool stalled = false;     // it was stopped for longer than the stall timeout, and killed
  std::string output;       // its standard output
};

struct LaunchResult {
  std::vector<RankOutcome> ranks;
  int first_failed = -1;    // the first rank to fail, or -1
  std::string error;        // why the launch itself failed (fork, pipes), empty otherwise
  int interrupted = 0;      // the signal the launcher got and passed to every rank, or 0
};

// LONGCTX_STALL_TIMEOUT_S when it is a whole number of seconds from 1 to 3600, else 10 s.
std::chrono::milliseconds stall_timeout_from_environment();

struct LaunchOptions {
  int ranks = 1;
  int master_port = 0;  // 0: a free port on the loopback interface
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  // How long a rank may stay stopped (state T in /proc/PID/stat) before it counts as
  // stalled: default 10 s, or LONGCTX_STALL_TIMEOUT_S (seconds, 1 to 3600) where set. Well
  // under the collectives' own timeout, so the stalled rank is found before its peers
  // time out waiting for it.
  std::chrono::milliseconds stall_timeout = stall_timeout_from_environment();
};

LaunchResult launch_local_ranks(const std::string& program, const std::vector<std::string>& args, const LaunchOptions& o);

}  // namespace longctx::cli
