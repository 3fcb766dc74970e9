#include "longctx/runtime/sharded_params.h"

#include "longctx/runtime/adamw.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/param_home.h"

namespace longctx::runtime {

using torch::Tensor;

ShardedParams::ShardedParams(LlamaWeights& w, Sharding sharding, bool offload_params, Communicator& comm, bool pinned)
    : w_(w), sharding_(sharding), pinned_(pinned), comm_(comm), layers_(static_cast<int>(w.layers.size())),
      device_(w.embed.device()), home_(offload_params, device_, pinned), device_home_(false, device_, pinned) {
  torch::NoGradGuard no_grad;
  const auto N = comm.world();
  for (int gi = 0; gi < layers_ + 2; ++gi) {
    Group g;
    g.slots = w.group(gi);
    for (Tensor* t : g.slots) {
      g.shapes.push_back(t->sizes().vec());
      g.numel += t->numel();
    }
    g.shard = (g.numel + N - 1) / N;
    const Tensor& first = *g.slots.front();
    const auto opts = first.options().device(device_);
    // The group as one flat vector, padding zero.
    Tensor flat = at::zeros({N * g.shard}, opts);
    std::int64_t off = 0;
    for (Tensor* t : g.slots) {
      flat.narrow(0, off, t->numel()).copy_(t->reshape({-1}));
      off += t->numel();
    }
    Tensor mine = flat.narrow(0, comm.rank() * g.shard, g.shard);
    if (sharding == Sharding::Zero3) {
      Tensor shard = home_of(gi).allocate({g.shard}, first.scalar_type());
      shard.copy_(mine);
      for (Tensor* t : g.slots) *t = Tensor();
      flat = Tensor();
      shards_.push_back(shard.requires_grad_(true));
    } else {
      off = 0;
      for (std::size_t i = 0; i < g.slots.size(); ++i) {
        const auto n = g.slots[i]->numel();
        *g.slots[i] = flat.narrow(0, off, n).view(g.shapes[i]).detach().requires_grad_(true);
        off += n;
      }
      g.flat = flat;
      shards_.push_back(mine.detach().requires_grad_(true));
    }
    groups_.push_back(std::move(g));
  }
}

Tensor ShardedParams::shard_in_slot(Tensor& full, int gi) const {
  const Tensor& shard = shards_[static_cast<std::size_t>(gi)];
  if (!home_of(gi).on_host()) return shard.detach();
  // From the host straight into this rank's slot: the all-gather then runs in place
  // (Communicator::all_gather), with no staging buffer on the device.
  Tensor slot = full.narrow(0, comm_.rank() * shard.numel(), shard.numel());
  slot.copy_(shard.detach(), /*non_blocking=*/true);
  return slot;
}

Tensor ShardedParams::empty_full(int gi) const {
  const Tensor& shard = shards_[static_cast<std::size_t>(gi)];
  return at::empty({comm_.world() * shard.numel()}, shard.options().device(device_));
}

std::size_t ShardedParams::full_bytes(int gi) const {
  const Tensor& shard = shards_[static_cast<std::size_t>(gi)];
  return static_cast<std::size_t>(comm_.world() * shard.numel()) * shard.element_size();
}

std::vector<Tensor> ShardedParams::leaves_of(Group& g, const Tensor& full, bool for_backward) {
  std::vector<Tensor> leaves;
  std::int64_t off = 0;
  for (const auto& shape : g.shapes) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    leaves.push_back(full.narrow(0, off, n).view(shape).detach().requires_grad_(true));
    off += n;
  }
  if (for_backward) g.sets.push_back(leaves);
  return leaves;
}

std::vector<Tensor> ShardedParams::gather(int gi) {
  Group& g = groups_[static_cast<std::size_t>(gi)];
  const bool for_backward = torch::GradMode::is_enabled();
  torch::NoGradGuard no_grad;
  if (auto it = inflight_.find(gi); it != inflight_.end() && !it->second.into_released) {
    Inflight f = std::move(it->second);
    inflight_.erase(it);
    f.pending.complete();
    return leaves_of(g, f.full, for_backward);
  }
  Tensor full = empty_full(gi);
  comm_.all_gather(full, shard_in_slot(full, gi));
  return leaves_of(g, full, for_backward);
}

void ShardedParams::release(int gi) {
  Group& g = groups_[static_cast<std::size_t>(gi)];
  if (g.sets.empty()) return;
  Tensor buffer = g.sets.back().front();
  park(buffer);
  g.released.push_back(buffer);
}

void ShardedParams::release_all(int gi) {
  for (const auto& set : groups_[static_cast<std::size_t>(gi)].sets)
    if (!set.empty()) park(set.front());
}

void ShardedParams::restore(int gi) {
  Group& g = groups_[static_cast<std::size_t>(gi)];
  if (g.released.empty()) return;
  torch::NoGradGuard no_grad;
  if (auto it = inflight_.find(gi); it != inflight_.end() && it->second.into_released) {
    Inflight f = std::move(it->second);
    inflight_.erase(it);
    f.pending.complete();
    g.released.pop_back();
    return;
  }
  Tensor full = unpark(g.released.back(), full_bytes(gi));
  g.released.pop_back();
  comm_.all_gather(full, shard_in_slot(full, gi));
}

void ShardedParams::prefetch(int gi) {
  if (sharding_ != Sharding::Zero3 || gi < 0 || gi >= static_cast<int>(groups_.size()) || inflight_.count(gi)) return;
  Group& g = groups_[static_cast<std::size_t>(gi)];
  torch::NoGradGuard no_grad;
  Inflight f;
  f.into_released = !g.released.empty();
  f.full = f.into_released ? unpark(g.released.back(), full_bytes(gi)) : empty_full(gi);
  f.source = shard_in_slot(f.full, gi);
  f.pending = comm_.all_gather_async(f.full, f.source);
  inflight_[gi] = std::move(f);
}

Tensor ShardedParams::flatten_grads(Group& g) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<Tensor>> sets;
  if (sharding_ == Sharding::Zero3) {
    sets = std::move(g.sets);
    g.sets.clear();
    g.released.clear();  // buffers released for good (the embedding's: nothing gathers into them)
  } else {
    std::vector<Tensor> own;
    for (Tensor* t : g.slots) own.push_back(*t);
    sets.push_back(own);
  }
  Tensor flat;
  for (auto& set : sets) {
    std::int64_t off = 0;
    for (auto& leaf : set) {
      const auto n = leaf.numel();
      if (leaf.grad().defined()) {
        if (!flat.defined()) flat = at::zeros({comm_.world() * g.shard}, leaf.grad().options());
        flat.narrow(0, off, n).add_(leaf.grad().reshape({-1}));
        leaf.mutable_grad().reset();
      }
      off += n;
    }
    // The gathered buffer's memory goes now: autograd's graph keeps the leaves (its
    // AccumulateGrad nodes hold them) until the whole backward ends, and with them the
    // buffer, one full group per layer already done.
    if (sharding_ == Sharding::Zero3 && !set.empty()) park(set.front());
  }
  return flat;
}

void ShardedParams::zero1_grads_to_host(int gi) {
  torch::NoGradGuard no_grad;
  Group& g = groups_[static_cast<std::size_t>(gi)];
  const std::int64_t begin = comm_.rank() * g.shard, end = begin + g.shard;
  Tensor sg;  // [shard] of the gradients' dtype, as prepare_step's
  std::int64_t off = 0;
  for (Tensor* t : g.slots) {
    const auto n = t->numel();
    if (t->grad().defined()) {
      Tensor gr = t->grad();
      comm_.all_reduce_sum(gr);
      const auto lo = std::max(off, begin), hi = std::min(off + n, end);
      if (lo < hi) {
        if (!sg.defined()) sg = at::zeros({g.shard}, gr.options());
        sg.narrow(0, lo - begin, hi - lo).copy_(gr.reshape({-1}).narrow(0, lo - off, hi - lo));
      }
    }
    off += n;
  }
  for (Tensor* t : g.slots) t->mutable_grad().reset();
  if (sg.defined()) host_grads_->gradient_to_host(shards_[static_cast<std::size_t>(gi)], sg);
}

void ShardedParams::finish_grads(int gi) {
  if (!shards_grads()) {
    if (host_grads_) zero1_grads_to_host(gi);
    return;
  }
  Group& g = groups_[static_cast<std::size_t>(gi)];
  Tensor flat = flatten_grads(g);
  if (!flat.defined()) return;
  torch::NoGradGuard no_grad;
  Tensor& shard = shards_[static_cast<std::size_t>(gi)];
  Tensor sg = at::empty({g.shard}, flat.options());
  comm_.reduce_scatter_sum(sg, flat);
  flat = Tensor();
  if (host_grads_) {
    host_grads_->gradient_to_host(shard, sg);
    return;
  }
  if (!shard.grad().defined())
    shard.mutable_grad() = sg;
  else
    shard.mutable_grad().add_(sg);
}

void ShardedParams::prepare_step() {
  if (sharding_ != Sharding::Zero1) return;
  torch::NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    // The full gradients are summed in place, then the shard's slice is copied out of them.
    for (Tensor* t : g.slots)
      if (t->grad().defined()) {
        Tensor gr = t->grad();
        comm_.all_reduce_sum(gr);
      }
    const std::int64_t begin = comm_.rank() * g.shard, end = begin + g.shard;
    Tensor sg;
    std::int64_t off = 0;
    for (Tensor* t : g.slots) {
      const auto n = t->numel();
      const auto lo = std::max(off, begin), hi = std::min(off + n, end);
      if (lo < hi && t->grad().defined()) {
        if (!sg.defined()) sg = at::zeros({g.shard}, t->grad().options());
        sg.narrow(0, lo - begin, hi - lo).copy_(t->grad().reshape({-1}).narrow(0, lo - off, hi - lo));
      }
      off += n;
    }
    for (Tensor* t : g.slots) t->mutable_grad().reset();
    if (sg.defined()) shards_[gi].mutable_grad() = sg;
  }
}

void ShardedParams::finish_step() {
  if (sharding_ == Sharding::Zero3) return;
  torch::NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    // The shard is already this rank's slot of the flat buffer: gathered in place, no copy
    // (process_group.h, start_gather_in_place; NCCL gathers in place when the input is that slot).
    Tensor send = shards_[gi].detach();
    comm_.all_gather(g.flat, send);
  }
}

}  // namespace longctx::runtime
