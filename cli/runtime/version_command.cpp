#include <fmt/format.h>

#include "cli/common/commands.h"
#include "longctx/runtime/build_info.h"

namespace longctx::cli {

void add_version_flag(CLI::App& app, bool& requested) {
  app.add_flag("--version", requested,
               "Print longctx's version, the LibTorch, CUDA and NCCL versions it was built with, "
               "and whether a GPU is visible now");
}

int print_version() {
  const auto b = runtime::build_info();
  fmt::print("longctx {}\n", b.longctx_version);
  fmt::print("LibTorch {}\n", b.libtorch_version);
  fmt::print("CUDA {} (built with), runtime {}\n", b.cuda_version, b.cuda_runtime_version);
  fmt::print("NCCL {} (built with), runtime {}\n", b.nccl_version, b.nccl_runtime_version);
  if (b.gpus_visible > 0)
    fmt::print("GPU: {} visible ({})\n", b.gpus_visible, b.gpu_name);
  else
    fmt::print("GPU: none visible ({}); the runtime uses the CPU virtual device\n", b.gpu_absent_reason);
  return 0;
}

}  // namespace longctx::cli
