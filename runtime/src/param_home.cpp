#include "longctx/runtime/param_home.h"

#include "longctx/runtime/memory_meter.h"

namespace longctx::runtime {

using torch::Tensor;

Tensor ParamHome::allocate(at::IntArrayRef sizes, torch::ScalarType dtype) const {
  return offload_ ? host_empty(sizes, dtype, pinned_) : at::empty(sizes, torch::TensorOptions().dtype(dtype).device(device_));
}

Tensor ParamHome::fetch(const Tensor& leaf) const {
  // On the CPU virtual device the clone is the device copy: the CPU allocator is its pool.
  return device_.is_cuda() ? leaf.to(device_, /*non_blocking=*/true) : leaf.clone();
}

void park(const Tensor& t) { resize_storage(t, 0); }

Tensor unpark(const Tensor& t, std::size_t bytes) {
  resize_storage(t, bytes);
  const auto elems = static_cast<std::int64_t>(bytes / t.element_size());
  Tensor flat = at::empty({0}, t.options());
  flat.set_(t.storage(), 0, {elems}, {1});
  return flat;
}

}  // namespace longctx::runtime
