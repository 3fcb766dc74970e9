// Checkpointed layers' inputs, kept on the device or offloaded to the host pool.
#include "longctx/runtime/checkpoint_store.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>

#include "longctx/runtime/memory_meter.h"

namespace longctx::runtime {

using torch::Tensor;

namespace {
struct CudaSide {
  c10::cuda::CUDAStream stream;
};
}  // namespace

CheckpointStore::CheckpointStore(bool offload) : offload_(offload) {}
CheckpointStore::~CheckpointStore() = default;

void CheckpointStore::keep(std::int64_t layer, const Tensor& x) {
  Entry e;
  Tensor d = x.detach();
  if (!offload_) {
    e.device = d;
  } else if (d.is_cuda()) {
    if (!side_stream_) side_stream_ = std::make_shared<CudaSide>(CudaSide{c10::cuda::getStreamFromPool()});
    auto& side = static_cast<CudaSide*>(side_stream_.get())->stream;
    e.host = host_empty(d.sizes(), d.scalar_type(), /*pinned=*/true);
    // The copy waits for the producer on the compute stream, then runs beside compute.
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream());
    produced.block(side);
    c10::cuda::CUDAStreamGuard guard(side);
    e.host.copy_(d, /*non_blocking=*/true);
    d.record_stream(side);
    auto ev = std::make_shared<at::cuda::CUDAEvent>();
    ev->record(side);
    e.ready = ev;
  } else {
    e.host = host_empty(d.sizes(), d.scalar_type(), /*pinned=*/false);
    e.host.copy_(d);
  }
  entries_[layer] = std::move(e);
}

void CheckpointStore::prefetch(std::int64_t layer) {
  auto it = entries_.find(layer);
  if (it == entries_.end() || it->second.device.defined()) return;
  Entry& e = it->second;
  if (side_stream_) {
    auto& side = static_cast<CudaSide*>(side_stream_.get())->stream;
    if (e.ready) static_cast<at::cuda::CUDAEvent*>(e.ready.get())->block(side);  // the offload finished
    c10::cuda::CUDAStreamGuard guard(side);
    e.device = at::empty(e.host.sizes(), e.host.options().device(c10::Device(c10::kCUDA, side.device_index())));
    e.device.copy_(e.host, /*non_blocking=*/true);
    auto ev = std::make_shared<at::cuda::CUDAEvent>();
    ev->record(side);
    e.ready = ev;
  } else {
    e.device = at::empty(e.host.sizes(), e.host.options());  // the CPU allocator: the device pool
    e.device.copy_(e.host);
  }
  e.host = Tensor();  // the host copy is released once the device copy exists
}

Tensor CheckpointStore::take(std::int64_t layer) {
  prefetch(layer);
  auto it = entries_.find(layer);
  TORCH_CHECK(it != entries_.end(), "no checkpoint kept for layer ", layer);
  Entry e = std::move(it->second);
  entries_.erase(it);
  if (side_stream_ && e.ready) {
    static_cast<at::cuda::CUDAEvent*>(e.ready.get())->block(c10::cuda::getCurrentCUDAStream());
    e.device.record_stream(c10::cuda::getCurrentCUDAStream());
  }
  return e.device;
}

void CheckpointStore::clear() { entries_.clear(); }

}  // namespace longctx::runtime
