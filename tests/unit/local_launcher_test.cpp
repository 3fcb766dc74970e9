// The local launcher with shell scripts as ranks: environment, outputs, and that a failing
// rank stops the others within the grace period instead of leaving them running.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <unistd.h>

#include "cli/longctx/local_launcher.h"

namespace longctx::cli {
namespace {

TEST(LocalLauncher, EveryRankGetsTheTorchrunEnvironmentAndItsOutputIsKept) {
  LaunchOptions o;
  o.ranks = 3;
  const auto r = launch_local_ranks("/bin/sh", {"-c", "echo \"$RANK/$WORLD_SIZE/$LOCAL_RANK/$MASTER_ADDR\""}, o);
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.first_failed, -1);
  ASSERT_EQ(r.ranks.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.ranks[static_cast<std::size_t>(i)].exit_status, 0);
    EXPECT_EQ(r.ranks[static_cast<std::size_t>(i)].output, std::to_string(i) + "/3/" + std::to_string(i) + "/127.0.0.1\n");
  }
}

TEST(LocalLauncher, AFailingRankStopsTheOthersWithinTheGracePeriod) {
  LaunchOptions o;
  o.ranks = 4;
  o.grace = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  // Rank 2 fails; the others would run for a minute, one of them ignoring SIGTERM.
  const auto r = launch_local_ranks(
      "/bin/sh", {"-c", "if [ \"$RANK\" = 2 ]; then exit 7; fi; if [ \"$RANK\" = 3 ]; then trap '' TERM; fi; sleep 60"}, o);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_EQ(r.first_failed, 2);
  EXPECT_EQ(r.ranks[2].exit_status, 7);
  for (int i : {0, 1, 3}) {
    EXPECT_TRUE(r.ranks[static_cast<std::size_t>(i)].stopped) << i;
    EXPECT_NE(r.ranks[static_cast<std::size_t>(i)].exit_status, 0) << i;
  }
}

// A rank that stops itself (SIGSTOP) never fails on its own; its peer waits on. The
// launcher must name the stopped rank, not the one waiting, and well before a collective's
// timeout (60 s) would end the waiting one.
TEST(LocalLauncher, AStoppedRankIsNamedAsStalledWithinTheStallTimeout) {
  LaunchOptions o;
  o.ranks = 2;
  o.stall_timeout = std::chrono::seconds(1);
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local_ranks("/bin/sh", {"-c", "if [ \"$RANK\" = 1 ]; then kill -STOP $$; fi; sleep 60"}, o);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_GE(took, std::chrono::seconds(1)) << "declared stalled before its timeout";
  ASSERT_EQ(r.first_failed, 1);
  EXPECT_TRUE(r.ranks[1].stalled);
  EXPECT_FALSE(r.ranks[0].stalled);
  EXPECT_TRUE(r.ranks[0].stopped);
}

// A rank stopped for less than the timeout and continued is not a stall.
TEST(LocalLauncher, ARankStoppedBrieflyIsNotAStall) {
  LaunchOptions o;
  o.ranks = 1;
  o.stall_timeout = std::chrono::seconds(3);
  const auto r = launch_local_ranks("/bin/sh", {"-c", "(sleep 1; kill -CONT $$) & kill -STOP $$; exit 0"}, o);
  EXPECT_EQ(r.first_failed, -1);
  EXPECT_EQ(r.ranks[0].exit_status, 0);
  EXPECT_FALSE(r.ranks[0].stalled);
}

// Ctrl-C reaches the launcher only (each rank has a process group of its own): the ranks must
// get the signal too and run their own cleanup, not be killed when the launcher dies.
TEST(LocalLauncher, AnInterruptIsPassedToEveryRankWhichCleansUp) {
  LaunchOptions o;
  o.ranks = 2;
  o.grace = std::chrono::seconds(5);
  const std::string mark = ::testing::TempDir() + "interrupted." + std::to_string(::getpid());
  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(::getpid(), SIGINT);
  });
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local_ranks(
      "/bin/sh", {"-c", "trap 'echo cleaned > " + mark + ".$RANK; exit 130' INT; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"}, o);
  interrupter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "waited for SIGKILL, not the ranks";
  EXPECT_EQ(r.interrupted, SIGINT);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.ranks[static_cast<std::size_t>(i)].exit_status, 130) << i;
    const std::string file = mark + "." + std::to_string(i);
    EXPECT_EQ(::access(file.c_str(), F_OK), 0) << "rank " << i << " did not run its handler";
    std::remove(file.c_str());
  }
  // The launcher's own handling is undone: SIGINT is the default again.
  struct sigaction now {};
  ::sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// SIGTERM is passed on as SIGINT is; a signal the launcher was started ignoring (nohup's
// SIGHUP) stays ignored, by it and by its ranks, which inherit it.
TEST(LocalLauncher, TermIsPassedOnAndAnIgnoredSignalStaysIgnored) {
  LaunchOptions o;
  o.ranks = 2;
  o.grace = std::chrono::seconds(5);
  std::thread terminator([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(::getpid(), SIGTERM);
  });
  auto r = launch_local_ranks("/bin/sh", {"-c", "trap 'exit 143' TERM; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"}, o);
  terminator.join();
  EXPECT_EQ(r.interrupted, SIGTERM);
  for (const auto& rank : r.ranks) EXPECT_EQ(rank.exit_status, 143) << rank.rank;

  struct sigaction ignore {}, before {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGHUP, &ignore, &before);
  std::thread hangup([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(::getpid(), SIGHUP);
  });
  // Each rank sends itself SIGHUP too: ignored, it goes on and says so.
  r = launch_local_ranks("/bin/sh", {"-c", "sleep 1; kill -HUP $$; echo alive"}, o);
  hangup.join();
  struct sigaction after {};
  ::sigaction(SIGHUP, &before, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN) << "the launcher restores the ignored disposition";
  EXPECT_EQ(r.interrupted, 0);
  EXPECT_EQ(r.first_failed, -1);
  for (const auto& rank : r.ranks) {
    EXPECT_EQ(rank.exit_status, 0) << rank.rank;
    EXPECT_EQ(rank.output, "alive\n") << rank.rank;
  }
}

TEST(LocalLauncher, TheStallTimeoutComesFromTheEnvironmentWithinBounds) {
  ::setenv("LONGCTX_STALL_TIMEOUT_S", "4", 1);
  EXPECT_EQ(stall_timeout_from_environment(), std::chrono::seconds(4));
  ::setenv("LONGCTX_STALL_TIMEOUT_S", "-1", 1);
  EXPECT_EQ(stall_timeout_from_environment(), std::chrono::seconds(10));
  ::setenv("LONGCTX_STALL_TIMEOUT_S", "1e9", 1);
  EXPECT_EQ(stall_timeout_from_environment(), std::chrono::seconds(10));
  ::unsetenv("LONGCTX_STALL_TIMEOUT_S");
  EXPECT_EQ(stall_timeout_from_environment(), std::chrono::seconds(10));
  EXPECT_LT(LaunchOptions{}.stall_timeout, std::chrono::seconds(60)) << "must beat the collectives' timeout";
}

TEST(LocalLauncher, AProgramThatCannotStartIsAFailure) {
  LaunchOptions o;
  o.ranks = 2;
  const auto r = launch_local_ranks("/nonexistent/program", {}, o);
  EXPECT_GE(r.first_failed, 0);
  EXPECT_EQ(r.ranks[static_cast<std::size_t>(r.first_failed)].exit_status, 127);
}

}  // namespace
}  // namespace longctx::cli
