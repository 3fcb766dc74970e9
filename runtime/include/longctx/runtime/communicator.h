#pragma once
// The collectives one rank of a distributed step takes part in, over c10d: Gloo on CPU,
// NCCL on CUDA.
//
// World = dp x r x u ranks (parallel_config.h, sequence_ranks): rank = (dp_index * r +
// ring_index) * u + ulysses_index. Ranks j*u .. j*u+u-1 form Ulysses group j; the r Ulysses
// groups of one data-parallel index form rings, one per Ulysses index, linking the ranks of
// that index in ring order. The u*r ranks of a data-parallel index hold one sample's sequence
// between them. ZeRO shards over the whole world. With one rank nothing is connected and
// every collective is the identity.
//
// Every tensor handed to a collective must live on the communicator's device (the rank's
// GPU under NCCL, the CPU under Gloo) and be contiguous: anything else throws
// CollectivePlacementError naming the collective and the tensor, on CPU as on CUDA, before
// the backend sees it (NCCL would fail on a host tensor, or read a strided one as dense).
//
// Gloo: collectives block the host; a peer that died or stalls makes them throw CommError
// within the group's timeout, naming the collective, so no rank hangs.
// NCCL: a collective returns once it is ordered before later work on the current stream;
// the host does not wait for the GPU (WorkNCCL::wait with a timeout would: see wait()). A
// peer that died or stalls is caught by NCCL's watchdog within the same timeout, which
// aborts the communicator and ends the rank with its own message naming the collective.
#include <memory>
#include <stdexcept>
#include <string>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include "common/result.h"
#include "longctx/runtime/process_group.h"
#include "longctx/runtime/ring_attention.h"

namespace longctx::runtime {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tensor handed to a collective is not on the communicator's device or not contiguous:
// a defect of the caller, not of the peers.
class CollectivePlacementError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class Communicator {
 public:
  // One rank: no peers. device: where the tensors handed to it live.
  static std::shared_ptr<Communicator> single(c10::Device device = c10::Device(c10::kCPU));
  // BadInput naming parallel.ulysses or parallel.ring unless ulysses * ring divides
  // env.world_size.
  static Result<std::shared_ptr<Communicator>> connect(const RankEnv& env, int ulysses,
                                                       const ProcessGroupOptions& options) {
    return connect(env, ulysses, 1, options);
  }
  static Result<std::shared_ptr<Communicator>> connect(const RankEnv& env, int ulysses, int ring,
                                                       const ProcessGroupOptions& options);

  int rank() const { return rank_; }
  int world() const { return world_; }
  int sp_rank() const { return rank_ % sp_size_; }  // in the Ulysses group
  int sp_size() const { return sp_size_; }
  int ring_rank() const { return (rank_ / sp_size_) % ring_size_; }  // in the ring
  int ring_size() const { return ring_size_; }
  int dp_rank() const { return rank_ / (sp_size_ * ring_size_); }
  int dp_size() const { return world_ / (sp_size_ * ring_size_); }
  // This rank's ring (its group is null with ring_size 1): ring attention's hops.
  RingGroup ring() const { return {ring_group_, ring_rank(), ring_size_, timeout_}; }
  c10::Device device() const { return device_; }

  // Ulysses group. send [u, ...], contiguous: send[j] goes to group rank j. Returns recv of
  // the same shape, recv[j] from group rank j. The only allocation is recv. Every
  // collective returns once Gloo's thread has let go of its tensors, so they die where the
  // caller drops them.
  torch::Tensor all_to_all(const torch::Tensor& send);
  // World: t <- sum over ranks, in place. REQUIRES: t contiguous.
  void all_reduce_sum(torch::Tensor& t);
  // World: the sum over ranks of a host scalar (the step's loss), reduced through a
  // one-element tensor on the communicator's device; returns once the sum is on the host.
  double all_reduce_sum(double value);
  // World: full [world * n] <- every rank's shard [n], in rank order. Allocates nothing
  // beyond the caller's tensors (process_group.h, start_gather_in_place).
  void all_gather(torch::Tensor& full, const torch::Tensor& shard);
  // World: shard [n] <- sum over ranks of full's rank-th slice [world * n]. full is the
  // send buffer and is consumed: on Gloo it is overwritten with the whole sum. Allocates
  // nothing beyond the caller's tensors.
  void reduce_scatter_sum(torch::Tensor& shard, torch::Tensor& full);

  // World: returns once every rank has called it.
  void barrier();

  // A world all-gather running beside compute; complete() before reading `full`.
  class Pending {
   public:
    Pending() = default;
    void complete();  // waits; throws CommError as the blocking calls do
    bool active() const { return work_.defined(); }

   private:
    friend class Communicator;
    c10::intrusive_ptr<c10d::Work> work_;
    std::string what_;
    const Communicator* comm_ = nullptr;
  };
  Pending all_gather_async(torch::Tensor& full, const torch::Tensor& shard);

  ~Communicator();

 private:
  Communicator() = default;
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const;
  // Throws CollectivePlacementError unless t is on device_ and contiguous.
  void check_placement(const torch::Tensor& t, const char* collective, const char* role) const;

  int rank_ = 0, world_ = 1, sp_size_ = 1, ring_size_ = 1;
  c10::Device device_{c10::kCPU};
  CommBackend backend_ = CommBackend::Gloo;
  std::chrono::milliseconds timeout_{0};
  c10::intrusive_ptr<c10d::Backend> world_group_, sp_group_;  // sp_group_ may be world_group_
  c10::intrusive_ptr<c10d::Backend> ring_group_;              // may be world_group_
};

}  // namespace longctx::runtime
