#include <array>
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/longctx/cluster_options.h"
#include "cli/common/commands.h"
#include "planner/core/knobs.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"
#include "planner/search/search.h"
#include "planner/core/units.h"
#include "planner/io/export.h"
#include "cli/longctx/plan_output.h"
#include "common/atomic_file.h"
#include "cli/longctx/progress_line.h"
#include "planner/search/stack_answers.h"

namespace longctx::cli {
namespace {

// The knob flags, one per row of the knob table (knobs.h), as given: parsed by the table's
// rules after CLI11, so a bad value exits 2 naming its flag like every other bad input.
struct KnobFlags {
  std::array<std::optional<std::string>, kKnobCount> value;  // --ulysses 2, --sharding zero3
  std::array<bool, kKnobCount> on{}, off{};                  // --offload-params, --no-offload-params
};

struct PlanOptions {
  ClusterOptions cluster;
  std::string seq;
  std::string output;
  KnobFlags knobs;
  bool no_search = false;
};

void add_knob_flags(CLI::App& sub, KnobFlags& f) {
  for (const Knob& k : knob_table()) {
    const auto i = static_cast<std::size_t>(k.id);
    if (k.kind != KnobKind::Switch) {
      sub.add_option(k.flag, f.value[i], k.rule.help)->type_name(k.kind == KnobKind::Int ? "INT" : "TEXT");
      continue;
    }
    sub.add_flag(k.flag, f.on[i], k.rule.help);
    sub.add_flag("--no-" + k.flag.substr(2), f.off[i], fmt::format("Fix {} off", k.flag));
  }
}

Result<Knobs> knobs_from(const KnobFlags& f) {
  Knobs k;
  for (const Knob& row : knob_table()) {
    const auto i = static_cast<std::size_t>(row.id);
    if (f.value[i]) {
      LONGCTX_TRY(auto v, parse_knob(row.id, *f.value[i], row.flag));
      fix(k, row.id, v);
    }
    if (f.on[i] && f.off[i])
      return Error::bad_input(row.flag, fmt::format("given with --no-{}; pass one of the two", row.flag.substr(2)));
    if (f.on[i]) fix(k, row.id, 1);
    if (f.off[i]) fix(k, row.id, 0);
  }
  return k;
}

int run_plan(const PlanOptions& o) {
  auto knobs = knobs_from(o.knobs);
  if (!knobs) return report_error(knobs.error());
  if (auto apart = check_distinct_output(o.output, "-o", cluster_input_paths(o.cluster)); !apart)
    return report_error(apart.error());
  // -o is opened (its temporary made beside it) before the search: a path that cannot take the
  // plan file is refused at once, not after a search of seconds or minutes. Left uncommitted
  // (an error, a plan refused), the temporary is removed.
  std::optional<AtomicFile> plan_file;
  if (!o.output.empty()) {
    auto opened = AtomicFile::open(o.output, "-o");
    if (!opened) return report_error(opened.error());
    plan_file.emplace(std::move(*opened));
  }
  auto answer = [&] {
    ProgressLine progress(fmt::format("plan: {} at {} tokens on {} x {}", o.cluster.model, o.seq, o.cluster.gpus,
                                      o.cluster.gpu));
    return answer_plan({o.cluster, o.seq, *knobs, o.no_search});
  }();
  if (!answer) return report_error(answer.error());
  const auto& [found, e, recorded] = *answer;
  if (plan_file) {
    const std::string text = plan_file_text(recorded);
    plan_file->write(text.data(), text.size());
    if (auto w = plan_file->commit(); !w) return report_error(w.error());
  }
  if (names_standard_output(o.output)) {
    // -o naming standard output makes the plan file the one document printed there: the answer
    // beside it would leave neither readable (`--json -o /dev/stdout` printed two documents).
  } else if (o.cluster.json) {
    fmt::print("{}\n", plan_answer_json(*answer, o.no_search).dump(2));
  } else {
    fmt::print("{}", render_plan(e));
    if (!o.no_search)
      fmt::print("\nsearch    {} configurations evaluated, {} feasible; fastest chosen\n", found.evaluated, found.feasible);
    if (!o.output.empty()) fmt::print("\nwrote {}\n", o.output);
  }
  if (!e.plan.prediction.feasible) return 3;
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* sub = app.add_subcommand(
      "plan",
      "Predict memory and speed of training at --seq on the cluster. Knobs you give are fixed; the others are "
      "searched for the fastest plan that fits (exit 3 when none does).");
  add_cluster_options(*sub, o->cluster);
  sub->add_option("--seq", o->seq,
                  "Sequence length, any whole number of tokens or with K, M, G (x1024), e.g. 999999, 128K, 1M; padded "
                  "to a multiple of the Ulysses degree")
      ->required();
  sub->add_option("-o,--output", o->output, "Write the plan file that `longctx run` reads");
  add_knob_flags(*sub, o->knobs);
  sub->add_flag("--no-search", o->no_search,
                "Evaluate exactly the knobs given, the others at none/1/0/off, even if it does not fit (exit 3 then)");
  return {sub, [o] { return run_plan(*o); }};
}

}  // namespace longctx::cli
