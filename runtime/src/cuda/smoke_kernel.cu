#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "longctx/runtime/cuda_smoke.h"

namespace longctx::runtime {
namespace {

__global__ void axpy(int n, float a, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Frees device memory on every path out.
struct DeviceBuffer {
  float* ptr = nullptr;
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
};

std::string describe(const char* step, cudaError_t e) {
  return std::string(step) + ": " + cudaGetErrorString(e);
}

}  // namespace

std::string run_cuda_smoke_kernel() {
  constexpr int n = 1 << 16;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) { x[i] = float(i % 97); y[i] = 1.0f; }
  DeviceBuffer dx, dy;
  cudaError_t e;
  if ((e = cudaMalloc(&dx.ptr, n * sizeof(float))) != cudaSuccess) return describe("cudaMalloc", e);
  if ((e = cudaMalloc(&dy.ptr, n * sizeof(float))) != cudaSuccess) return describe("cudaMalloc", e);
  cudaMemcpy(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy.ptr, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  axpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx.ptr, dy.ptr);
  if ((e = cudaGetLastError()) != cudaSuccess) return describe("launch", e);
  if ((e = cudaMemcpy(y.data(), dy.ptr, n * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return describe("copy back", e);
  for (int i = 0; i < n; ++i)
    if (y[i] != 2.0f * float(i % 97) + 1.0f) return "wrong result at element " + std::to_string(i);
  return {};
}

}  // namespace longctx::runtime
