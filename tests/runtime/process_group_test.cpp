// Two ranks over c10d Gloo on loopback, one thread each: the path every distributed test takes.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <thread>

#include "longctx/runtime/process_group.h"
#include "loopback_port.h"

namespace longctx::runtime {
namespace {

int free_port() {
  // Ports from the pid keep parallel test processes apart.
  return 20000 + static_cast<int>(::getpid() % 20000);
}

TEST(ProcessGroup, GlooAllReduceSumsAcrossTwoRanks) {
  longctx::testing::no_flight_recorder();
  const int world = 2;
  const int port = free_port();
  std::vector<torch::Tensor> results(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      RankEnv env{r, world, r, "127.0.0.1", port};
      ProcessGroupOptions o;
      o.timeout = std::chrono::seconds(30);
      auto pg = connect_process_group(env, o);
      if (!pg) {
        errors[r] = pg.error().what();
        return;
      }
      std::vector<torch::Tensor> t = {torch::full({4}, float(r + 1))};
      (*pg)->allreduce(t)->wait();
      results[r] = t[0];
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(errors[r].empty()) << errors[r];
    EXPECT_TRUE(torch::equal(results[r], torch::full({4}, 3.0f)));
  }
}

TEST(ProcessGroup, RankEnvRejectsARankOutsideTheWorld) {
  ::setenv("RANK", "4", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  auto e = rank_env_from_environment();
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().field, "RANK");
}

}  // namespace
}  // namespace longctx::runtime
