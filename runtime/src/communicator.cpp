#include "longctx/runtime/communicator.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace longctx::runtime {

std::shared_ptr<Communicator> Communicator::single() { return std::shared_ptr<Communicator>(new Communicator()); }

Result<std::shared_ptr<Communicator>> Communicator::connect(const RankEnv& env, int ulysses,
                                                            const ProcessGroupOptions& options) {
  if (ulysses < 1 || env.world_size % ulysses != 0)
    return Error::bad_input("parallel.ulysses", fmt::format("{} does not divide the world of {} ranks (world = dp x u)",
                                                            ulysses, env.world_size));
  std::shared_ptr<Communicator> c(new Communicator());
  c->rank_ = env.rank;
  c->world_ = env.world_size;
  c->sp_size_ = ulysses;
  c->timeout_ = options.timeout;
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
  return c;
}

Communicator::~Communicator() = default;


void Communicator::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const {
  try {
    work->wait(timeout_);
    // Gloo's worker thread holds the finished work, and with it the collective's tensors,
    // until its loop moves on; waiting for that (a few microseconds, bounded) makes the
    // tensors die where the caller drops them, so each phase's bytes are the same every run.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (work.use_count() > 1 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  } catch (const std::exception& e) {
    throw CommError(fmt::format("{} failed on rank {} of {} (a peer rank died or stalled; {} s timeout): {}", what,
                                rank_, world_, timeout_.count() / 1000.0, e.what()));
  }
}

torch::Tensor Communicator::all_to_all(const torch::Tensor& send) {
  if (sp_size_ == 1) return send;
  TORCH_CHECK(send.is_contiguous() && send.size(0) == sp_size_, "all_to_all: send must be [u, ...] contiguous");
  torch::Tensor recv = at::empty(send.sizes(), send.options());
  std::vector<std::int64_t> counts;  // empty: equal splits over dim 0
  torch::Tensor in = send;
  wait(sp_group_->alltoall_base(recv, in, counts, counts), "Ulysses all-to-all");
  return recv;
}

void Communicator::all_reduce_sum(torch::Tensor& t) {
  if (world_ == 1) return;
  std::vector<torch::Tensor> ts = {t};
  wait(world_group_->allreduce(ts), "gradient all-reduce");
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
  Pending p;
  if (world_ == 1) {
    full.copy_(shard);
    return p;
  }
  torch::Tensor in = shard;
  p.work_ = world_group_->_allgather_base(full, in);
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

void Communicator::reduce_scatter_sum(torch::Tensor& shard, const torch::Tensor& full) {
  if (world_ == 1) {
    shard.copy_(full);
    return;
  }
  torch::Tensor in = full;
  wait(world_group_->_reduce_scatter_base(shard, in), "ZeRO gradient reduce-scatter");
}

}  // namespace longctx::runtime
