// The shared entry point of the exports (io/export.h): the stack a word names, the plan's own
// stack's rule, and the files rendered as text.
#include "planner/io/export.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/core/units.h"
#include "planner/io/toml_text.h"
#include "planner/io/yaml_text.h"
#include "planner/search/memory_model.h"
#include "planner/stacks/profile.h"

namespace longctx {

Result<StackExporter> parse_stack(const std::string& text, const std::string& field) {
  std::string words;
  const auto& profiles = stack_profiles();
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const StackExporter& e = *profiles[i]->exporter;
    if (text == e.word) return e;
    words += fmt::format("{}{}", i == 0 ? "" : i + 1 == profiles.size() ? " or " : ", ", e.word);
  }
  return Error::bad_input(field, fmt::format("'{}' is not a stack; give {}", text, words));
}

namespace {

// Whether the plan itself fits, predicted once however many stacks' checks ask
// (export_verdicts asks each stack).
class PlanFits {
 public:
  explicit PlanFits(const Plan& p) : p_(p) {}
  bool operator()() {
    if (!fits_) fits_ = predict(p_).feasible;
    return *fits_;
  }

 private:
  const Plan& p_;
  std::optional<bool> fits_;
};

// The step `to`'s files run for p, where longctx models it, held to p's budget: over it while
// p fits, the exported run would run out of memory where the plan says it fits, and the export
// is refused as a knob that holds more is (stacks/exporter.h). A plan that does not fit itself
// is exported as asked (export_command.cpp says so and exits 3).
Result<bool> check_own_step_fits(const Plan& p, const StackExporter& to, PlanFits& plan_fits) {
  if (!to.as_run) return true;
  const std::optional<Plan> run = to.as_run(p);
  if (!run || !validate(*run) || !plan_fits()) return true;
  const Prediction own = predict(*run);
  if (own.feasible) return true;
  const std::string over =
      own.binding == "host memory"
          ? fmt::format("{} of host memory per node, over its {}", format_bytes(own.peak_host_bytes),
                        format_bytes(p.cluster.host_budget_bytes_per_node))
      : allocator_binds(*run, own)
          ? fmt::format("{} allocated at its peak, whose blocks the caching allocator cannot place within the budget "
                        "of {}",
                        format_bytes(own.peak_device_bytes), format_bytes(p.cluster.device_budget_bytes))
          : fmt::format("{} per GPU as nvidia-smi shows it, over the budget of {}", format_bytes(own.peak_nvidia_smi_bytes),
                        format_bytes(p.cluster.device_budget_bytes));
  return Error::bad_input("train.stack",
                          fmt::format("--stack {} runs this plan as its own step, {} with MLP tiles {} and loss tiles "
                                      "{}, which longctx predicts at {}, where this plan fits: the run would run out of "
                                      "memory; re-plan with --stack {} for a plan it runs within the budget",
                                      to.word, describe(run->train.stack), run->parallel.mlp_tiles,
                                      run->parallel.loss_tiles, over, to.word));
}

// check_expressible, with the plan's own fit shared among the stacks asked.
Result<bool> check_expressible(const Plan& p, const StackExporter& to, PlanFits& plan_fits) {
  // A stack that runs on CUDA GPUs only (ArcticTraining: DeepSpeed and flash attention) is not
  // exported for a plan of the CPU virtual device, as `plan --stack` refuses one.
  for (const StackProfile* s : stack_profiles())
    if (std::strcmp(s->exporter->word, to.word) == 0 && s->cuda_only && p.cluster.hardware.backend != Backend::Cuda)
      return Error::bad_input("--stack", fmt::format("--stack {} {}, and the plan is for {}; plan again with a GPU "
                                                     "preset (--gpu h100-80gb)",
                                                     to.word, s->cuda_only, p.cluster.hardware.name));
  // A plan made for a stack predicts that stack's step: its own files are the ones to run,
  // another stack's would run a step it did not predict.
  const StackProfile& made_for = stack_profile(p.train.stack.kind);
  const StackExporter& own = *made_for.exporter;
  if (own.plans_predict != nullptr && std::strcmp(own.word, to.word) != 0)
    return Error::bad_input("--stack", fmt::format("the plan predicts {} (train.stack {}); export it with --stack {}, or "
                                                   "re-plan with --stack longctx for --stack {}",
                                                   own.plans_predict, made_for.name, own.word, to.word));
  LONGCTX_TRY(auto runs, to.check(p));
  (void)runs;
  return check_own_step_fits(p, to, plan_fits);
}

}  // namespace

Result<bool> check_expressible(const Plan& p, const StackExporter& to) {
  PlanFits plan_fits(p);
  return check_expressible(p, to, plan_fits);
}

std::vector<ExportVerdict> export_verdicts(const Plan& p) {
  std::vector<ExportVerdict> out;
  PlanFits plan_fits(p);
  for (const StackProfile* s : stack_profiles()) {
    auto ok = check_expressible(p, *s->exporter, plan_fits);
    out.push_back({s->exporter->word, ok ? std::nullopt : std::optional<Error>(ok.error())});
  }
  return out;
}

std::string describe_exports(const Plan& p) {
  std::vector<std::string> yes, no;
  for (const ExportVerdict& v : export_verdicts(p)) {
    if (!v.refusal) yes.push_back(v.word);
    else no.push_back(fmt::format("{} ({})", v.word, v.refusal->field));
  }
  const std::string refused = no.empty() ? "" : fmt::format("not {}", fmt::join(no, ", "));
  if (yes.empty()) return fmt::format("none: {}", refused);
  return fmt::format("{}{}{}", fmt::join(yes, ", "), no.empty() ? "" : "; ", refused);
}

nlohmann::json exports_json(const Plan& p) {
  nlohmann::json out = nlohmann::json::array();
  for (const ExportVerdict& v : export_verdicts(p)) {
    nlohmann::json j = {{"stack", v.word}, {"exports", !v.refusal}};
    if (v.refusal) {
      j["field"] = v.refusal->field;
      j["refusal"] = v.refusal->message;
    }
    out.push_back(std::move(j));
  }
  return out;
}

Result<ExportedFiles> export_plan(const Plan& p, const StackExporter& to) {
  LONGCTX_TRY(auto ok, check_expressible(p, to));
  (void)ok;
  const StackFiles written = to.write(p);
  ExportedFiles out;
  out.approximations = written.approximations;
  for (const ExportFile& f : written.files) {
    switch (f.format) {
      // Bytes that are not UTF-8 (a name from a folder's name) become U+FFFD, as in the YAML
      // and TOML files (planner/io/quoted_text.h), instead of dump() throwing.
      case ExportFile::Format::Json:
        out.files[f.name] = f.value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        break;
      case ExportFile::Format::Yaml: out.files[f.name] = to_yaml(f.value, f.comment); break;
      case ExportFile::Format::Text: out.files[f.name] = f.value.get<std::string>(); break;
      case ExportFile::Format::Toml: {
        LONGCTX_TRY(std::string text, to_toml(f.value, f.comment));
        out.files[f.name] = text;
        break;
      }
    }
  }
  return out;
}

std::vector<std::string> every_export_file_name() {
  std::vector<std::string> names;
  for (const StackProfile* s : stack_profiles())
    for (const char* name : s->exporter->file_names) names.emplace_back(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string does_not_fit_note(const Plan& p, const Prediction& pr) {
  if (pr.feasible) return "";
  const bool host = pr.binding == "host memory";
  return fmt::format("the plan does not fit: {} binds ({} at the peak, budget {} per {}); its run would run out of "
                     "memory, so plan again for one that fits",
                     pr.binding, format_bytes(host ? pr.peak_host_bytes : pr.peak_nvidia_smi_bytes),
                     format_bytes(host ? p.cluster.host_budget_bytes_per_node : p.cluster.device_budget_bytes),
                     host ? "node" : "GPU");
}

}  // namespace longctx
