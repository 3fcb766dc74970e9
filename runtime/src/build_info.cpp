#include "longctx/runtime/build_info.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <torch/version.h>

namespace longctx::runtime {

BuildInfo build_info() {
  BuildInfo b;
  b.longctx_version = LONGCTX_VERSION;
  b.libtorch_version = TORCH_VERSION;
  b.cuda_version = fmt::format("{}.{}", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  b.nccl_version = fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  int rt = 0;
  b.cuda_runtime_version = cudaRuntimeGetVersion(&rt) == cudaSuccess
                               ? fmt::format("{}.{}", rt / 1000, (rt % 1000) / 10)
                               : "unavailable";
  int nccl = 0;
  b.nccl_runtime_version = ncclGetVersion(&nccl) == ncclSuccess
                               ? fmt::format("{}.{}.{}", nccl / 10000, (nccl % 10000) / 100, nccl % 100)
                               : "unavailable";
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    b.gpu_absent_reason = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
                              ? fmt::format("no usable CUDA driver or device: {}", cudaGetErrorString(e))
                              : cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error so LibTorch starts clean
  } else if (count == 0) {
    b.gpu_absent_reason = "the CUDA driver reports no devices";
  }
  b.gpus_visible = e == cudaSuccess ? count : 0;
  if (b.gpus_visible > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) b.gpu_name = prop.name;
    // LibTorch must agree: it is what the runtime will use.
    if (c10::cuda::device_count() == 0) b.gpu_absent_reason = "LibTorch sees no CUDA device";
  }
  return b;
}

}  // namespace longctx::runtime
