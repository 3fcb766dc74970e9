#pragma once
// The c10d store of a test's ranks (threads of one process), hosted by the test itself on a
// loopback port the kernel picks as the store binds it: no port is chosen first and bound
// later, so tests running at once cannot take each other's port and mix their ranks.
#include <chrono>
#include <cstdlib>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "longctx/runtime/process_group.h"

namespace longctx::testing {

// A test's ranks are threads of one process, and c10d's flight recorder is one per process:
// FlightRecorder::recordWithResetEnabled (FlightRecorderDetail.hpp, LibTorch 2.11) inserts
// into its map of process groups before taking its mutex, so two ranks' collectives racing
// into it can corrupt the map (a rare segfault under ProcessGroupGloo::enqueue, caught in
// gdb). One process per rank, as `run` starts them, never records from two threads at once.
// Call before any rank makes its groups (the recorder reads the variable once); a
// TORCH_FR_BUFFER_SIZE already set is left as it is.
inline void no_flight_recorder() { ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0); }

class LoopbackStore {
 public:
  explicit LoopbackStore(int world) {
    no_flight_recorder();
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
