#include <fmt/format.h>

#include "cli/common/commands.h"
#include "planner/core/hardware.h"
#include "planner/core/model_config.h"
#include "planner/core/units.h"

namespace longctx::cli {

Command add_models_command(CLI::App& app) {
  auto* sub = app.add_subcommand("models", "List the model and hardware presets with their sizes");
  return {sub, [] {
            fmt::print("{:<16} {:>7} {:>6} {:>7} {:>5} {:>4} {:>8} {:>9}\n", "model", "params",
                       "layers", "hidden", "heads", "kv", "head_dim", "vocab");
            for (const auto& name : model_preset_names()) {
              auto m = load_model(name);
              if (!m) {
                fmt::print(stderr, "error: {}\n", m.error().what());
                return 1;
              }
              const double p = double(m->total_params());
              const std::string params = p >= 1e9 ? fmt::format("{:.2f}B", p / 1e9)
                                                  : fmt::format("{:.2f}M", p / 1e6);
              fmt::print("{:<16} {:>7} {:>6} {:>7} {:>5} {:>4} {:>8} {:>9}\n", name, params, m->layers, m->hidden, m->heads,
                         m->kv_heads, m->head_dim, m->vocab);
            }
            fmt::print("\n{:<12} {:>12} {:>16} {:>10}\n", "gpu", "device mem", "host mem/node", "backend");
            for (const auto& name : hardware_preset_names()) {
              auto h = load_hardware(name);
              if (!h) {
                fmt::print(stderr, "error: {}\n", h.error().what());
                return 1;
              }
              fmt::print("{:<12} {:>12} {:>16} {:>10}\n", name, format_bytes(h->device_memory_bytes),
                         format_bytes(h->host_memory_bytes_per_node),
                         h->backend == Backend::Cpu ? "cpu" : "cuda");
            }
            return 0;
          }};
}

}  // namespace longctx::cli
