#pragma once
// One rank's membership in a c10d group: Gloo on CPU, NCCL on CUDA.
//
// Ranks find each other through a TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it),
// the convention of torchrun, so any launcher that sets the torchrun environment works.
#include <chrono>
#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include "common/result.h"

namespace c10d {
class Work;
class Backend;
class Store;
}  // namespace c10d

namespace longctx::runtime {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The store already runs (a test hosting it on a port the kernel picked): rank 0 connects
  // to it as the others do instead of hosting one.
  bool store_hosted = false;
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Unset means a single rank;
// a malformed or inconsistent value is an error that names the variable.
Result<RankEnv> rank_env_from_environment();

// The device a rank computes on: the CPU for "cpu"; for "cuda", GPU LOCAL_RANK among the
// `visible` ones (c10::cuda::device_count(), after CUDA_VISIBLE_DEVICES). Errors, naming the
// variable and the fix: no GPU visible, or LOCAL_RANK >= visible (more ranks were started on
// this node than it has GPUs). Unknown device names are runnable()'s to refuse.
Result<c10::Device> rank_device(const std::string& device, int local_rank, int visible);

enum class CommBackend { Gloo, Nccl };

struct ProcessGroupOptions {
  CommBackend backend = CommBackend::Gloo;
  // A collective that waits longer than this fails instead of hanging: a dead peer is
  // reported within this bound.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // The rank's device (rank_device). NCCL: the group is bound to it
  // (c10d::Backend::setBoundDeviceId), so its communicators and barrier use this GPU and
  // not the current one; every tensor handed to a collective must live there.
  c10::Device device{c10::kCPU};
};

// Connects to (or, on rank 0, hosts) the store and creates the backend.
// Errors (unreachable store, timeout) are returned, not thrown.
Result<c10::intrusive_ptr<c10d::Backend>> connect_process_group(const RankEnv& env,
                                                                 const ProcessGroupOptions& options);

// The store alone (rank 0 hosts it), to build several groups on.
Result<c10::intrusive_ptr<c10d::Store>> connect_store(const RankEnv& env, std::chrono::milliseconds timeout);
// A group of `size` ranks (this one is `rank` in it) whose members meet under `prefix` of
// the store: the whole world, or a subgroup such as one Ulysses group.
Result<c10::intrusive_ptr<c10d::Backend>> make_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::string& prefix, int rank, int size,
                                                     const RankEnv& env, const ProcessGroupOptions& options);

// Waits for a Gloo work within `timeout` (throws what c10d throws), then until Gloo's worker
// thread has let go of it (bounded, a few microseconds): the thread holds a finished work, and
// with it the tensors it sent or received, until its loop moves on, so without this they would
// die on that thread's schedule rather than where the caller drops them, and a phase's bytes
// would differ run to run. (NCCL's watchdog holds its work until the GPU finishes: not for it.)
void wait_gloo_and_release(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout);

// Starts gathering every rank's shard into `full` over `group` (this rank is `rank`): full
// [size * n] elements (contiguous, any shape) <- each rank's shard [n] in rank order,
// allocating nothing beyond the caller's tensors. `shard` may be this rank's slot of `full`
// itself (then it is not copied). NCCL: _allgather_base. Gloo: its all-gather fills a
// full-size flat tensor of its own on its worker thread (ProcessGroupGloo.cpp,
// AsyncAllgatherWork), a send buffer's worth of bytes no plan counts; instead full <- shard
// in its slot and zeros elsewhere, summed over the ranks by an in-place all-reduce.
// Returns the work; `full` is complete once it is waited for.
c10::intrusive_ptr<c10d::Work> start_gather_in_place(c10d::Backend& group, CommBackend backend, int rank,
                                                     torch::Tensor& full, const torch::Tensor& shard);

}  // namespace longctx::runtime
