#include "cli/longctx/runtime_exec.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace longctx::cli {

namespace {
std::filesystem::path runtime_path() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : self.parent_path()) / "longctx-runtime";
}
}  // namespace

bool runtime_available() { return std::filesystem::exists(runtime_path()); }
std::string runtime_program() { return runtime_path().string(); }

int exec_runtime(const std::vector<std::string>& args) {
  const auto runtime = runtime_path();
  if (!std::filesystem::exists(runtime)) {
    fmt::print(stderr, "longctx: error: this build has no runtime ({} is missing); build with -DLONGCTX_WITH_RUNTIME=ON\n",
               runtime.string());
    return 1;
  }
  std::vector<std::string> owned = {runtime.string()};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(runtime.c_str(), argv.data());
  fmt::print(stderr, "longctx: error: cannot start {}: {}\n", runtime.string(), std::strerror(errno));
  return 1;
}

}  // namespace longctx::cli
