#pragma once
// Starts N local ranks of a program with the torchrun environment (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), collects each rank's standard
// output, and leaves no rank behind: when one fails, the others are stopped (SIGTERM, then
// SIGKILL after a grace period) and the failing rank is reported.
#include <chrono>
#include <string>
#include <vector>

namespace longctx::cli {

struct RankOutcome {
  int rank = 0;
  int exit_status = -1;     // the rank's exit status; 128 + signal when a signal ended it
  bool stopped = false;     // ended by the launcher after another rank failed
  std::string output;       // its standard output
};

struct LaunchResult {
  std::vector<RankOutcome> ranks;
  int first_failed = -1;    // the first rank to fail, or -1
  std::string error;        // why the launch itself failed (fork, pipes), empty otherwise
};

struct LaunchOptions {
  int ranks = 1;
  int master_port = 0;  // 0: a free port on the loopback interface
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
};

LaunchResult launch_local_ranks(const std::string& program, const std::vector<std::string>& args, const LaunchOptions& o);

}  // namespace longctx::cli
