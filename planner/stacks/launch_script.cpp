#include "planner/stacks/launch_script.h"

#include <string_view>

#include <fmt/format.h>

#include "planner/io/quoted_text.h"

namespace longctx {

std::string model_to_load(const Plan& p) { return p.model.source.empty() ? p.model.name : p.model.source; }

std::vector<std::string> deepspeed_node_setup() {
  return {"DEEPSPEED_NODES=()",
          "if [ \"$NNODES\" -gt 1 ]; then",
          "  # The runner takes the nodes from a hostfile even when each node launches itself: without",
          "  # one it runs on this node alone and refuses --num_nodes above 1. Under --no_ssh the names",
          "  # are only keys of its world info, never contacted; the file goes once the runner has read it.",
          "  hostfile=\"$(mktemp \"${TMPDIR:-/tmp}/longctx-hostfile.XXXXXX\")\"",
          "  for ((node = 0; node < NNODES; node++)); do echo \"node$node slots=$GPUS_PER_NODE\"; done > \"$hostfile\"",
          "  (sleep 600; rm -f \"$hostfile\") >/dev/null 2>&1 &",
          "  DEEPSPEED_NODES=(--hostfile \"$hostfile\" --no_ssh --node_rank \"$NODE_RANK\")",
          "fi"};
}

namespace {

// `s` as one single-quoted bash word: nothing inside single quotes expands, and a quote of its
// own closes them, is escaped, and opens them again. (A name escaped for a double-quoted
// ${MODEL:-name} broke the script: bash reads a single quote there as quoting, and
// m' # ... left it unterminated.) Callers pass names through comment_text first, so the script
// stays UTF-8 and one line a parameter.
std::string shell_single_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The parameters, each from the environment with the plan's value as default.
std::vector<std::string> parameters(const Plan& p, const LaunchSpec& s) {
  const auto& c = p.cluster.shape;
  std::vector<std::string> out = {fmt::format("NNODES=\"${{NNODES:-{}}}\"", c.nodes),
          fmt::format("GPUS_PER_NODE=\"${{GPUS_PER_NODE:-{}}}\"", c.gpus_per_node),
          "NODE_RANK=\"${NODE_RANK:-0}\"",
          "MASTER_ADDR=\"${MASTER_ADDR:-}\"",
          "MASTER_PORT=\"${MASTER_PORT:-29500}\""};
  if (s.takes_model) {
    out.push_back("MODEL_OF_PLAN=" + shell_single_quoted(comment_text(model_to_load(p))));
    out.push_back("MODEL=\"${MODEL:-$MODEL_OF_PLAN}\"");
  }
  return out;
}

// The plan's memory is per rank at its world size: another size would hold other shards. Each
// node has its own number below NNODES, and across nodes every node names node 0's address:
// the default 127.0.0.1 had each node claim rank 0 and wait for itself.
std::vector<std::string> world_guard(const Plan& p) {
  const std::int64_t world = p.cluster.shape.world();
  return {fmt::format("if [ \"$((NNODES * GPUS_PER_NODE))\" -ne {} ]; then", world),
          fmt::format("  echo \"launch.sh: the plan is for {} ranks, not NNODES x GPUS_PER_NODE = "
                      "$((NNODES * GPUS_PER_NODE)); re-plan with longctx for that count\" >&2",
                      world),
          "  exit 2", "fi",
          "if ! [ \"$NODE_RANK\" -ge 0 ] 2>/dev/null || ! [ \"$NODE_RANK\" -lt \"$NNODES\" ]; then",
          "  echo \"launch.sh: NODE_RANK=$NODE_RANK: give each node its number, 0 to $((NNODES - 1))\" >&2",
          "  exit 2", "fi",
          "if [ -z \"$MASTER_ADDR\" ]; then",
          "  if [ \"$NNODES\" -gt 1 ]; then",
          "    echo \"launch.sh: MASTER_ADDR: give node 0's address on every node (127.0.0.1 has each node meet "
          "itself)\" >&2",
          "    exit 2", "  fi", "  MASTER_ADDR=127.0.0.1", "fi"};
}

}  // namespace

ExportFile launch_script(const Plan& p, const char* word, const LaunchSpec& s) {
  std::string t = "#!/usr/bin/env bash\n";
  t += fmt::format("# {}\n", comment_text(export_header(p, word)));
  t += fmt::format("# Launches the plan with {}. Run it on each of the NNODES nodes with the same MASTER_ADDR and\n"
                   "# MASTER_PORT (node 0's) and that node's NODE_RANK; the defaults are the plan's:\n"
                   "#   [NNODES=..] [GPUS_PER_NODE=..] [NODE_RANK=..] [MASTER_ADDR=..] [MASTER_PORT=..]{} \\\n"
                   "#     bash launch.sh {}\n"
                   "# The files beside it are found from any folder.\n",
                   s.launcher, s.takes_model ? " [MODEL=..]" : "", s.usage);
  for (const std::string& line : s.about) t += "# " + comment_text(line) + "\n";
  t += "set -euo pipefail\nhere=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\n";
  for (const std::string& line : parameters(p, s)) t += line + "\n";
  for (const std::string& line : world_guard(p)) t += line + "\n";
  if (p.cluster.expandable_segments) {
    t += "# The plan predicts the caching allocator with expandable segments.\n";
    t += "export PYTORCH_CUDA_ALLOC_CONF=\"${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}\"\n";
  }
  if (s.takes_script)
    t += fmt::format("if [ $# -lt 1 ]; then echo \"usage: bash launch.sh {}\" >&2; exit 2; fi\n", s.usage);
  for (const std::string& line : s.setup) t += line + "\n";
  for (std::size_t i = 0; i < s.command.size(); ++i)
    t += (i == 0 ? "exec " : "  ") + s.command[i] + (i + 1 < s.command.size() ? " \\\n" : "\n");
  return {kLaunchScriptFile, ExportFile::Format::Text, t, {}};
}

}  // namespace longctx
