#pragma once
// Where checkpointed layer inputs wait for their layer's backward: kept on the device, or
// offloaded to the host pool after forward and prefetched back before the backward.
// CUDA: pinned host memory and a side stream; the prefetch of layer l-1 overlaps the
// backward of layer l. CPU: the copies are synchronous; the pools are counted apart.
#include <map>
#include <memory>

#include <torch/torch.h>

namespace longctx::runtime {

class CheckpointStore {
 public:
  explicit CheckpointStore(bool offload);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  bool offloads() const { return offload_; }
  // Keeps x (detached) as layer `layer`'s input. REQUIRES: nothing kept for `layer` yet.
  void keep(std::int64_t layer, const torch::Tensor& x);
  // Starts bringing layer's input back to the device; a no-op if none is kept or it is there.
  void prefetch(std::int64_t layer);
  // The input on the device, waiting for its prefetch; the store forgets it.
  // REQUIRES: keep(layer) was called since the last take(layer).
  torch::Tensor take(std::int64_t layer);
  void clear();

 private:
  struct Entry {
    torch::Tensor host;      // offloaded copy (offload only)
    torch::Tensor device;    // on the device: kept, or prefetched
    std::shared_ptr<void> ready;  // CUDA: the event the prefetch records
  };
  bool offload_;
  std::map<std::int64_t, Entry> entries_;
  std::shared_ptr<void> side_stream_;  // CUDA only
};

}  // namespace longctx::runtime
