#pragma once
// The c10d store of a test's ranks (threads of one process), hosted by the test itself on a
// loopback port the kernel picks as the store binds it: no port is chosen first and bound
// later, so tests running at once cannot take each other's port and mix their ranks.
#include <chrono>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "longctx/runtime/process_group.h"

namespace longctx::testing {

class LoopbackStore {
 public:
  explicit LoopbackStore(int world) {
    c10d::TCPStoreOptions o;
    o.port = 0;
    o.isServer = true;
    o.numWorkers = world;
    o.waitWorkers = false;
    o.timeout = std::chrono::seconds(60);
    store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  }
  // Rank `rank` of `world`, which connects to this store.
  runtime::RankEnv env(int rank, int world) const {
    runtime::RankEnv e{rank, world, rank, "127.0.0.1", static_cast<int>(store_->getPort())};
    e.store_hosted = true;
    return e;
  }

 private:
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace longctx::testing
