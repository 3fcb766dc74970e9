#include "longctx/runtime/process_group.h"
#include "exception_text.h"

#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace longctx::runtime {
namespace {

Result<int> env_int(const char* name, int fallback, int min) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < min || x > 1 << 20)
    return Error::bad_input(name, fmt::format("'{}' is not an integer >= {}; unset it or fix the launcher", v, min));
  return static_cast<int>(x);
}

}  // namespace

Result<RankEnv> rank_env_from_environment() {
  RankEnv e;
  LONGCTX_TRY(e.rank, env_int("RANK", 0, 0));
  LONGCTX_TRY(e.world_size, env_int("WORLD_SIZE", 1, 1));
  LONGCTX_TRY(e.local_rank, env_int("LOCAL_RANK", e.rank, 0));
  LONGCTX_TRY(e.master_port, env_int("MASTER_PORT", 29500, 1));
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  if (e.rank >= e.world_size)
    return Error::bad_input("RANK", fmt::format("{} is not below WORLD_SIZE {}", e.rank, e.world_size));
  return e;
}

Result<c10::Device> rank_device(const std::string& device, int local_rank, int visible) {
  if (device != "cuda") return c10::Device(c10::kCPU);
  if (visible <= 0) return Error::bad_input("--device", "cuda was asked for but no GPU is visible; use --device cpu");
  if (local_rank >= visible) {
    const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
    return Error::bad_input(
        "LOCAL_RANK", fmt::format("{} names GPU {} but this node has {} visible{}: start at most {} rank{} per node "
                                  "(--nproc {}), or make more GPUs visible",
                                  local_rank, local_rank, visible == 1 ? "1 GPU" : fmt::format("{} GPUs", visible),
                                  mask ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", mask) : std::string(), visible,
                                  visible == 1 ? "" : "s", visible));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

Result<c10::intrusive_ptr<c10d::Store>> connect_store(const RankEnv& env, std::chrono::milliseconds timeout) {
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(env.master_port);
    so.isServer = env.rank == 0 && !env.store_hosted;
    so.numWorkers = env.world_size;
    // A client counts itself in (TCPStore::waitForWorkers) only when it waits too: every rank
    // waits, so that the hosting rank sees them all.
    so.waitWorkers = true;
    so.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    return tcp;
  } catch (const std::exception& e) {
    return Error{ErrorKind::Internal, "process group",
                 fmt::format("rank {} of {} could not reach the store at {}:{}: {}", env.rank, env.world_size,
                             env.master_addr, env.master_port, exception_text(e))};
  }
}

Result<c10::intrusive_ptr<c10d::Backend>> make_group(const c10::intrusive_ptr<c10d::Store>& base,
                                                     const std::string& prefix, int rank, int size,
                                                     const RankEnv& env, const ProcessGroupOptions& options) {
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>("longctx/" + prefix, base);
    if (options.backend == CommBackend::Gloo) {
      auto o = c10d::ProcessGroupGloo::Options::create();
      o->timeout = options.timeout;
      const bool loopback = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
      o->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                    : c10d::ProcessGroupGloo::createDefaultDevice());
      c10::intrusive_ptr<c10d::Backend> pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
      return pg;
    }
    if (c10::cuda::device_count() == 0)
      return Error::bad_input("--device", "NCCL needs a GPU and none is visible; use --device cpu");
    if (!options.device.is_cuda())
      return Error::bad_input("--device", "NCCL groups join ranks on GPUs; pass the rank's cuda device");
    auto o = c10d::ProcessGroupNCCL::Options::create();
    // The watchdog's bound: a collective not finished on the GPU within it aborts the
    // communicator (Communicator::wait explains why the host does not wait with a timeout).
    o->timeout = options.timeout;
    c10::intrusive_ptr<c10d::Backend> pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
    // Without a bound device, ProcessGroupNCCL::barrier guesses one from the current device
    // and the ranks it has seen (guessDeviceId); bound, every rank uses its own GPU.
    pg->setBoundDeviceId(options.device);
    return pg;
  } catch (const std::exception& e) {
    return Error{ErrorKind::Internal, "process group",
                 fmt::format("rank {} of {} could not form group '{}' at {}:{}: {}", env.rank, env.world_size, prefix,
                             env.master_addr, env.master_port, exception_text(e))};
  }
}

Result<c10::intrusive_ptr<c10d::Backend>> connect_process_group(const RankEnv& env,
                                                                 const ProcessGroupOptions& options) {
  c10::intrusive_ptr<c10d::Store> store;
  LONGCTX_TRY(store, connect_store(env, options.timeout));
  return make_group(store, "world", env.rank, env.world_size, env, options);
}

void wait_gloo_and_release(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout) {
  work->wait(timeout);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (work.use_count() > 1 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
}

c10::intrusive_ptr<c10d::Work> start_gather_in_place(c10d::Backend& group, CommBackend backend, int rank,
                                                     torch::Tensor& full, const torch::Tensor& shard) {
  torch::Tensor flat = full.view({-1});
  const auto n = shard.numel();
  TORCH_CHECK(flat.numel() == group.getSize() * n, "all_gather: full must hold size * n elements");
  torch::Tensor in = shard.reshape({-1});
  if (backend == CommBackend::Nccl) return group._allgather_base(flat, in);
  // Zeros around this rank's slot, the shard in it (unless it already is that slot).
  flat.narrow(0, 0, rank * n).zero_();
  flat.narrow(0, (rank + 1) * n, (group.getSize() - rank - 1) * n).zero_();
  torch::Tensor slot = flat.narrow(0, rank * n, n);
  if (slot.data_ptr() != shard.data_ptr()) slot.copy_(in);
  std::vector<torch::Tensor> ts = {flat};
  return group.allreduce(ts);
}

}  // namespace longctx::runtime
