#include "longctx/runtime/communicator.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <vector>

#include <ATen/record_function.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "longctx/runtime/memory_meter.h"
#include "exception_text.h"

namespace longctx::runtime {

std::shared_ptr<Communicator> Communicator::single(c10::Device device) {
  std::shared_ptr<Communicator> c(new Communicator());
  c->device_ = device;
  return c;
}

Result<std::shared_ptr<Communicator>> Communicator::connect(const RankEnv& env, int ulysses, int ring,
                                                            const ProcessGroupOptions& options) {
  if (ulysses < 1 || env.world_size % ulysses != 0)
    return Error::bad_input("parallel.ulysses", fmt::format("{} does not divide the world of {} ranks (world = dp x u)",
                                                            ulysses, env.world_size));
  if (ring < 1 || env.world_size % (ulysses * ring) != 0)
    return Error::bad_input("parallel.ring", fmt::format("{} x ulysses {} does not divide the world of {} ranks "
                                                         "(world = dp x r x u)",
                                                         ring, ulysses, env.world_size));
  std::shared_ptr<Communicator> c(new Communicator());
  c->rank_ = env.rank;
  c->world_ = env.world_size;
  c->sp_size_ = ulysses;
  c->ring_size_ = ring;
  c->timeout_ = options.timeout;
  c->device_ = options.device;
  c->backend_ = options.backend;
  if (env.world_size == 1) return c;
  c10::intrusive_ptr<c10d::Store> store;
  LONGCTX_TRY(store, connect_store(env, options.timeout));
  LONGCTX_TRY(c->world_group_, make_group(store, "world", env.rank, env.world_size, env, options));
  if (ulysses == env.world_size) {
    c->sp_group_ = c->world_group_;
  } else if (ulysses > 1) {
    const int group = env.rank / ulysses;
    LONGCTX_TRY(c->sp_group_,
                make_group(store, fmt::format("ulysses{}", group), env.rank % ulysses, ulysses, env, options));
  }
  if (ring == env.world_size) {
    c->ring_group_ = c->world_group_;
  } else if (ring > 1) {
    // Every rank is in exactly one ring: its data-parallel index and Ulysses index name it.
    LONGCTX_TRY(c->ring_group_, make_group(store, fmt::format("ring{}.{}", c->dp_rank(), c->sp_rank()), c->ring_rank(),
                                           ring, env, options));
  }
  return c;
}

Communicator::~Communicator() = default;


void Communicator::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const {
  // The time the rank waits for the exchange, the peers' lateness included, as an operator
  // that `run --op-times` (op_timer.h) counts in the phase: "c10d::wait(Ulysses all-to-all)".
  RECORD_FUNCTION("c10d::wait(" + what + ")", std::vector<c10::IValue>());
  try {
    if (backend_ == CommBackend::Nccl) {
      // No timeout: WorkNCCL::wait(timeout) blocks the host until the GPU has finished the
      // collective when a timeout is given, and only orders the current stream after it
      // when none is (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp, WorkNCCL::wait).
      // A timed wait would make every all-to-all and reduce-scatter a device sync. The
      // group's timeout is still enforced, by the watchdog (ProcessGroupNCCL::Options::timeout).
      work->wait();
      return;
    }
    wait_gloo_and_release(work, timeout_);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("{} failed on rank {} of {} (a peer rank died or stalled; {} s timeout): {}", what,
                                rank_, world_, timeout_.count() / 1000.0, exception_text(e)));
  }
}

void Communicator::check_placement(const torch::Tensor& t, const char* collective, const char* role) const {
  if (t.device() == device_ && t.is_contiguous()) return;
  throw CollectivePlacementError(fmt::format(
      "{} on rank {}: the {} is {} on {}; the communicator's collectives take contiguous tensors on {}", collective,
      rank_, role, t.is_contiguous() ? "contiguous" : "not contiguous", t.device().str(), device_.str()));
}

namespace {
// Each collective that goes to peers counts in the open phase (PhaseRecord::collectives),
// as the planner counts its exchanging ops' launches.
void count_collective() {
  if (auto* m = active_meter()) m->on_collective();
}
}  // namespace

torch::Tensor Communicator::all_to_all(const torch::Tensor& send) {
  check_placement(send, "Ulysses all-to-all", "send buffer");
  if (sp_size_ == 1) return send;
  TORCH_CHECK(send.size(0) == sp_size_, "all_to_all: send must be [u, ...]");
  torch::Tensor recv = at::empty(send.sizes(), send.options());
  std::vector<std::int64_t> counts;  // empty: equal splits over dim 0
  torch::Tensor in = send;
  count_collective();
  wait(sp_group_->alltoall_base(recv, in, counts, counts), "Ulysses all-to-all");
  return recv;
}

void Communicator::all_reduce_sum(torch::Tensor& t) {
  check_placement(t, "gradient all-reduce", "tensor");
  if (world_ == 1) return;
  std::vector<torch::Tensor> ts = {t};
  count_collective();
  wait(world_group_->allreduce(ts), "gradient all-reduce");
}

double Communicator::all_reduce_sum(double value) {
  if (world_ == 1) return value;
  torch::Tensor sum = at::full({1}, value, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  std::vector<torch::Tensor> ts = {sum};
  count_collective();
  wait(world_group_->allreduce(ts), "loss all-reduce");
  return sum.item<double>();  // on CUDA: waits for the sum on the current stream
}

void Communicator::barrier() {
  if (world_ == 1) return;
  wait(world_group_->barrier(), "barrier");
}

void Communicator::all_gather(torch::Tensor& full, const torch::Tensor& shard) {
  Pending p = all_gather_async(full, shard);
  p.complete();
}

Communicator::Pending Communicator::all_gather_async(torch::Tensor& full, const torch::Tensor& shard) {
  check_placement(full, "ZeRO parameter all-gather", "output");
  check_placement(shard, "ZeRO parameter all-gather", "shard");
  Pending p;
  if (world_ == 1) {
    full.copy_(shard);
    return p;
  }
  count_collective();
  p.work_ = start_gather_in_place(*world_group_, backend_, rank_, full, shard);
  p.what_ = "ZeRO parameter all-gather";
  p.comm_ = this;
  return p;
}

void Communicator::Pending::complete() {
  if (!work_.defined()) return;
  auto w = std::move(work_);
  work_.reset();
  comm_->wait(w, what_);
}

void Communicator::reduce_scatter_sum(torch::Tensor& shard, torch::Tensor& full) {
  check_placement(shard, "ZeRO gradient reduce-scatter", "shard");
  check_placement(full, "ZeRO gradient reduce-scatter", "input");
  if (world_ == 1) {
    shard.copy_(full);
    return;
  }
  count_collective();
  if (backend_ == CommBackend::Gloo) {
    // The sum over ranks in place (Gloo's own reduce-scatter clones full: process_group.h,
    // start_gather_in_place),
    // then this rank's slice.
    std::vector<torch::Tensor> ts = {full};
    wait(world_group_->allreduce(ts), "ZeRO gradient reduce-scatter");
    shard.copy_(full.narrow(0, rank_ * shard.numel(), shard.numel()));
    return;
  }
  wait(world_group_->_reduce_scatter_base(shard, full), "ZeRO gradient reduce-scatter");
}

}  // namespace longctx::runtime
