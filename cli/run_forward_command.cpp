#include "commands.h"
#include "runtime_exec.h"

namespace longctx::cli {

Command add_run_forward_command(CLI::App& app) {
  auto args = std::make_shared<std::vector<std::string>>();
  auto* sub = app.add_subcommand("run",
                                 "Run a plan file as real LibTorch training steps and show measured beside predicted memory "
                                 "(`longctx run --help` for its options)");
  sub->set_help_flag();  // longctx-runtime answers --help with the real options
  sub->allow_extras();
  sub->prefix_command();
  return {sub, [sub, args] {
            std::vector<std::string> forwarded = {"run"};
            for (const auto& a : sub->remaining()) forwarded.push_back(a);
            return exec_runtime(forwarded);
          }};
}

}  // namespace longctx::cli
