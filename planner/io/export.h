#pragma once
// A plan as the configuration a training stack runs it with (docs/export.md): each stack's
// writer and its refusals live in its folder (planner/stacks/<name>/export.h), named by a
// `longctx export --stack` word through its profile; this is the shared entry point, which
// refuses a plan made for another stack and renders the files as text (JSON, YAML, TOML).
// Pure functions of the plan: no file is read or written here (the CLI and the Python
// package write what export_plan returns).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"
#include "planner/core/plan.h"
#include "planner/stacks/exporter.h"

namespace longctx {

// The files a stack needs, by file name, and the approximations made in writing them.
struct ExportedFiles {
  std::map<std::string, std::string> files;
  std::vector<std::string> approximations;
};

// The exporter an `export --stack` word names ("arctic", "hf", "deepspeed", "torchtitan");
// BadInput naming `field` otherwise.
Result<StackExporter> parse_stack(const std::string& text, const std::string& field);

// BadInput naming the knob and the stack (or "--stack", for a plan made for another stack)
// when `to` cannot run the plan without more memory than the plan predicts; ok otherwise.
// Also BadInput naming "train.stack" where the plan fits and the step `to`'s files run for it
// (StackExporter::as_run, as longctx models that stack) does not: a plan of longctx's runtime
// whose MLP tiles ArcticTraining runs in its own shards, beside its own ZeRO-3 buffers and
// communicators, can be over the budget there. Costs two predictions of the step.
Result<bool> check_expressible(const Plan& p, const StackExporter& to);

// Whether one `export --stack` word runs a plan: its refusal (check_expressible's) if not.
struct ExportVerdict {
  std::string word;
  std::optional<Error> refusal;
};
// Every stack's verdict on p, in the registry's order (each profile's exporter asked once).
std::vector<ExportVerdict> export_verdicts(const Plan& p);
// "arctic; not deepspeed (parallel.loss_tiles), hf (...)": the words that export p, then those
// that refuse it with the field each names. One line of every plan and max-context answer.
std::string describe_exports(const Plan& p);
// [{"stack": "arctic", "exports": true}, {"stack": "hf", "exports": false, "field": ...,
// "refusal": ...}]: the "exports" block of the JSON answers.
nlohmann::json exports_json(const Plan& p);

// check_expressible, then every file the stack needs, as text. Its names are among the
// exporter's file_names.
Result<ExportedFiles> export_plan(const Plan& p, const StackExporter& to);
// Where the plan does not fit (`plan --no-search` writes such plans, and they export as asked),
// what `export` says beside its files: what binds, the peak and the budget; "" where it fits.
// `prediction`: the plan's, evaluated afresh.
std::string does_not_fit_note(const Plan& p, const Prediction& prediction);

// Every name any stack's export may write (each exporter's file_names), sorted, each once.
std::vector<std::string> every_export_file_name();

}  // namespace longctx
