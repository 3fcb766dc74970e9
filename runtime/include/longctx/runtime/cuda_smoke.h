#pragma once
// A kernel of our own built for sm_90, launched on the first GPU: proves the toolchain,
// the driver and the device agree. Returns an empty string on success, else what failed.
#include <string>

namespace longctx::runtime {

std::string run_cuda_smoke_kernel();

}  // namespace longctx::runtime
