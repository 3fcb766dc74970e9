#pragma once
// What this binary was built with, and what it can see now.
#include <string>

namespace longctx::runtime {

struct BuildInfo {
  std::string longctx_version;
  std::string libtorch_version;     // TORCH_VERSION of the headers compiled against
  std::string cuda_version;         // CUDA Toolkit headers compiled against ("13.0")
  std::string cuda_runtime_version; // libcudart loaded now ("13.0"), or "unavailable"
  std::string nccl_version;         // nccl.h compiled against ("2.28.9")
  std::string nccl_runtime_version; // libnccl loaded now
  int gpus_visible = 0;             // CUDA devices visible to this process now
  std::string gpu_name;             // first device's name, empty without a GPU
  std::string gpu_absent_reason;    // why no GPU is visible, empty when one is
};

BuildInfo build_info();

}  // namespace longctx::runtime
