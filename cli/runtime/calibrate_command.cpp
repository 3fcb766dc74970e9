// longctx calibrate: measures this machine with the runtime's own kernels and writes a
// hardware preset that `--gpu FILE` then plans with (runtime/calibrate.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli/common/commands.h"
#include "cli/common/error_report.h"
#include "cli/common/model_paths.h"
#include "common/atomic_file.h"
#include "planner/core/model_config.h"
#include "planner/search/request.h"
#include "planner/core/units.h"
#include "planner/io/quoted_text.h"
#include "longctx/runtime/calibrate.h"
#include "longctx/runtime/process_group.h"

namespace longctx::cli {
namespace {

using namespace longctx::runtime;

struct CalibrateArgs {
  std::string base = "cpu", name, model = "tiny-gqa", seq = "4096", device = "cpu", output;
  int threads = 1;
  double seconds = 0.5;
};


struct Measured {
  Calibration calibration;
  int rank = 0;
};

Result<Measured> measure(const CalibrateArgs& a) {
  CalibrateOptions o;
  LONGCTX_TRY(o.base, load_hardware(a.base));
  ClusterRequest model_request;
  model_request.model = a.model;
  LONGCTX_TRY(o.model, resolve_model(model_request));
  LONGCTX_TRY(o.seq, parse_tokens(a.seq, "--seq"));
  if (a.device == "cuda" && o.base.backend != Backend::Cuda)
    return Error::bad_input("--gpu", fmt::format("'{}' is a CPU preset; calibrate CUDA from a GPU preset such as "
                                                 "h100-80gb", a.base));
  if (a.device == "cpu" && o.base.backend != Backend::Cpu)
    return Error::bad_input("--device", fmt::format("cpu measures the CPU virtual device; start from --gpu cpu, or "
                                                    "measure '{}' with --device cuda", a.base));
  if (a.device == "cuda" && !torch::cuda::is_available())
    return Error::bad_input("--device", "cuda was asked for but no GPU is visible; use --device cpu");
  o.name = a.name;
  o.threads = a.threads;
  o.seconds_per_probe = a.seconds;
  o.progress = stderr;

  LONGCTX_TRY(const RankEnv env, rank_env_from_environment());
  LONGCTX_TRY(const torch::Device device,
              rank_device(a.device, env.local_rank, a.device == "cuda" ? static_cast<int>(torch::cuda::device_count()) : 0));
  ProcessGroupOptions po;
  po.backend = device.is_cuda() ? CommBackend::Nccl : CommBackend::Gloo;
  po.device = device;
  // One Ulysses group of every rank: the all-to-all probe spans the world.
  LONGCTX_TRY(const auto comm, Communicator::connect(env, env.world_size, po));
  LONGCTX_TRY(auto c, calibrate(o, *comm));
  return Measured{std::move(c), comm->rank()};
}

int run_calibrate(const CalibrateArgs& a) {
  // The output is checked before measuring (half a minute or more): a folder, a FIFO or an
  // unwritable folder is refused now, not after the work. The probe's temporary is removed.
  if (!a.output.empty()) {
    // Nor may it be the base preset the calibration starts from (a preset file given to --gpu),
    // which the write would replace: a second calibration then started from the first's; nor
    // the model's config.json (--model's file, or the one its folder or cached Hub id reads).
    std::vector<NamedPath> inputs = model_input_paths(a.model);
    inputs.push_back({a.base, "--gpu"});
    if (auto apart = check_distinct_output(a.output, "-o", inputs); !apart) return report_error(apart.error());
    auto probe = AtomicFile::open(a.output, "-o");
    if (!probe) return report_error(probe.error());
  }
  auto m = measure(a);
  if (!m) return report_error(m.error());
  if (m->rank != 0) return 0;  // one preset: rank 0's
  const std::string text = calibration_json(m->calibration).dump(2) + "\n";
  if (a.output.empty()) {
    fmt::print("{}", text);
    return 0;
  }
  if (auto w = write_text_atomically(a.output, "-o", text); !w) return report_error(w.error());
  fmt::print(stderr, "calibrate: wrote {} ({}); plan with --gpu {}\n", a.output, m->calibration.hardware.name, a.output);
  return 0;
}

}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* sub = app.add_subcommand("calibrate", "Measure this machine with the runtime's own kernels and write a hardware "
                                              "preset for --gpu FILE");
  sub->add_option("--gpu", a->base, "The preset whose memory sizes and links the measured one keeps (default cpu)");
  sub->add_option("--device", a->device, "cpu (the virtual device) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--model", a->model, "The model whose shapes the probes use (default tiny-gqa)");
  sub->add_option("--seq", a->seq, "Tokens the probes use (default 4096)");
  sub->add_option("--threads", a->threads, "LibTorch intra-op threads, as `run --threads` (default 1)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--seconds", a->seconds, "Seconds spent on each probe past its fewest calls, one untimed and three timed (default 0.5)")->check(CLI::Range(0.01, 60.0));
  sub->add_option("--name", a->name, "The preset's name (default: the base's with -calibrated)");
  sub->add_option("-o", a->output, "Write the preset to FILE (default: print it)");
  return {sub, [a] { return run_calibrate(*a); }};
}

}  // namespace longctx::cli
