// longctx._core: the planner library for Python, through nanobind. Everything crosses the
// boundary as plain data: requests as dicts of strings and integers, answers as the JSON the
// CLI prints (so `longctx.max_context(...)` and `longctx max-context --json` are one answer),
// errors as values — (True, payload) or (False, {kind, field, message}) — which the Python
// package turns into typed exceptions. No LibTorch: the planner only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/longctx/plan_output.h"
#include "common/atomic_file.h"
#include "common/input_file.h"
#include "planner/io/comparison.h"
#include "planner/io/export.h"
#include "planner/io/plan_text.h"
#include "planner/io/prediction_drift.h"
#include "planner/footprint/torch_ring_attention.h"
#include "planner/core/knobs.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"
#include "planner/core/model_config.h"
#include "planner/core/plan.h"
#include "planner/core/settings.h"
#include "planner/io/quoted_text.h"
#include "planner/search/request.h"
#include "planner/search/search.h"
#include "planner/search/stack_answers.h"

namespace nb = nanobind;

namespace longctx::python {
namespace {

// (ok, payload): payload is the answer's JSON text, or the error as {kind, field, message}.
using Answer = std::pair<bool, std::string>;

std::string kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::BadInput: return "bad_input";
    case ErrorKind::NoFit: return "no_fit";
    case ErrorKind::Internal: return "internal";
  }
  return "internal";
}

// The field and message escaped as the CLI prints them (cli/common/error_report.h
// report_error: terminal_text): a value echoed back (a path, a model's name) may hold control
// bytes, which must not reach a terminal raw, or bytes that are not UTF-8, which dump() throws on.
Answer failure(const Error& e) {
  return {false, nlohmann::json{{"kind", kind_name(e.kind)},
                                {"field", terminal_text(e.field)},
                                {"message", terminal_text(e.message)}}
                     .dump()};
}
Answer success(const nlohmann::json& j) { return {true, j.dump()}; }

// Knobs by their plan-file name (the knob table's `name`), values as text: "zero3", "4", "true".
Result<Knobs> knobs_from(const std::map<std::string, std::string>& given) {
  Knobs k;
  for (const auto& [key, text] : given) {
    const Knob* row = nullptr;
    for (const Knob& r : knob_table())
      if (key == r.name) row = &r;
    if (!row) {
      std::string keys;
      for (const Knob& r : knob_table()) keys += std::string(keys.empty() ? "" : ", ") + r.name;
      return Error::bad_input(key, "is neither a knob nor a setting; the knobs are " + keys);
    }
    if (row->kind == KnobKind::Switch) {
      if (text != "true" && text != "false")
        return Error::bad_input(key, "is a switch: give True or False");
      fix(k, row->id, text == "true" ? 1 : 0);
      continue;
    }
    LONGCTX_TRY(auto v, parse_knob(row->id, text, key));
    fix(k, row->id, v);
  }
  return k;
}

// An answer's plan as `max-context -o` writes its file (max_context_command.cpp
// answer_plan_text): evaluated again with the prediction per phase, which the search's plan
// (max_context_json's "plan") leaves empty.
nlohmann::json recorded_plan_json(const MaxContextResult& r) {
  return plan_to_json(with_phase_predictions(evaluate(r.plan)));
}

// max-context's answer; with stack "all" every stack's answer under "stacks" (stack_answers.h),
// each plan as -o writes it beside the first (NAME.<stack>.json).
Answer max_context_answer(const ClusterRequest& a, bool ladder) {
  if (a.stack == kEveryStack) {
    const auto all = answer_max_context_per_stack(a, ladder);
    if (!all.front().answer) return failure(*all.front().refusal);
    nlohmann::json j = max_context_answer_json(*all.front().answer);
    j["plan"] = recorded_plan_json(*all.front().answer);
    j["stacks"] = stack_answers_json(all);
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i].answer) j["stacks"][i]["plan"] = recorded_plan_json(*all[i].answer);
    return success(j);
  }
  auto r = answer_max_context(a, ladder);
  if (!r) return failure(r.error());
  nlohmann::json j = max_context_answer_json(*r);
  j["plan"] = recorded_plan_json(*r);
  return success(j);
}

Answer plan_answer(const ClusterRequest& a, const std::string& seq, const std::map<std::string, std::string>& knobs,
                   bool no_search) {
  auto k = knobs_from(knobs);
  if (!k) return failure(k.error());
  auto r = answer_plan({a, seq, *k, no_search});
  if (!r) return failure(r.error());
  return success(plan_answer_json(*r, no_search));
}

Result<Plan> plan_of(const std::string& plan_json) {
  // The nesting bound before parsing (plan_from_text): a deeply nested plan is refused by
  // name instead of overflowing the stack.
  return plan_from_text(plan_json, "plan");
}

// The breakdown and the live set at the peak, as `longctx explain` prints them.
Answer explain_answer(const std::string& plan_json, int live_rows) {
  auto p = plan_of(plan_json);
  if (!p) return failure(p.error());
  return {true, cli::render_plan(evaluate(*p), live_rows)};
}

// Where the prediction a plan file records differs from this planner's (`longctx explain`'s
// notes), one note a line; "" where they agree or the file records none.
Answer drift_answer(const std::string& plan_json) {
  auto p = plan_of(plan_json);
  if (!p) return failure(p.error());
  return {true, drift_note(prediction_differences(p->prediction, with_phase_predictions(evaluate(*p)).prediction))};
}

// The files a training stack runs the plan with, and the approximations made (`longctx export`).
Answer export_answer(const std::string& plan_json, const std::string& stack_name) {
  auto p = plan_of(plan_json);
  if (!p) return failure(p.error());
  auto stack = parse_stack(stack_name, "stack");
  if (!stack) return failure(stack.error());
  auto e = export_plan(*p, *stack);
  if (!e) return failure(e.error());
  // A plan that does not fit exports as asked, with the note `longctx export` prints on stderr
  // (export_command.cpp run_export): its run would run out of memory. "" when it fits.
  const std::string note = does_not_fit_note(*p, evaluate(*p).plan.prediction);
  return success({{"files", e->files}, {"approximations", e->approximations}, {"note", note}});
}

// What positions past the model's max_position_embeddings need at the plan's length, as
// `plan --json` says it in "positions" (stack_answers.cpp plan_answer_json:
// max_positions_note); "" within it.
Answer positions_answer(const std::string& plan_json) {
  auto p = plan_of(plan_json);
  if (!p) return failure(p.error());
  return {true, max_positions_note(p->model, p->train.seq)};
}

// Which stacks' files run the plan (io/export.h exports_json).
Answer exports_answer(const std::string& plan_json) {
  auto p = plan_of(plan_json);
  return p ? success(exports_json(*p)) : failure(p.error());
}

// `longctx compare --json`'s answer: the plan's peaks beside a measured trace's (a longctx
// trace or a PyTorch profiler trace with profile_memory=True).
Answer compare_answer(const std::string& plan_json, const std::string& trace_path) {
  auto p = plan_of(plan_json);
  if (!p) return failure(p.error());
  auto trace = read_trace_file(trace_path);
  if (!trace) return failure(trace.error());
  auto c = compare_to_trace(*p, *trace, trace_path);
  return c ? success(comparison_json(*c)) : failure(c.error());
}

Answer model_answer(const ClusterRequest& request) {
  auto m = resolve_model(request);
  return m ? success(model_to_json(*m)) : failure(m.error());
}

// The request as Python fills it: its fields, one attribute a row of the settings table
// (settings.h) under the request's field name.
void bind_request(nb::module_& m) {
  auto request = nb::class_<longctx::ClusterRequest>(m, "ClusterRequest")
                     .def(nb::init<>())
                     .def_rw("model", &longctx::ClusterRequest::model)
                     .def_rw("model_config_json", &longctx::ClusterRequest::model_config_json)
                     .def_rw("gpus", &longctx::ClusterRequest::gpus)
                     .def_rw("gpus_per_node", &longctx::ClusterRequest::gpus_per_node)
                     .def_rw("gpu", &longctx::ClusterRequest::gpu)
                     .def_rw("budget", &longctx::ClusterRequest::budget)
                     .def_rw("host_mem", &longctx::ClusterRequest::host_mem)
                     .def_rw("expandable_segments", &longctx::ClusterRequest::expandable_segments)
                     .def_rw("techniques", &longctx::ClusterRequest::techniques);
#define LONGCTX_SETTING_ATTRIBUTE(field, Type, member, rule) request.def_rw(#field, &longctx::ClusterRequest::field);
  LONGCTX_SETTING_TABLE(LONGCTX_SETTING_ATTRIBUTE)
#undef LONGCTX_SETTING_ATTRIBUTE
}

// The knobs the API takes as keywords: (key, kind).
std::vector<std::pair<std::string, std::string>> knob_keys() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Knob& k : knob_table())
    out.emplace_back(k.name, k.kind == KnobKind::Switch ? "switch" : k.kind == KnobKind::Int ? "int" : "text");
  return out;
}

// The settings the API takes as keywords: (keyword, request attribute, kind, negated).
std::vector<std::tuple<std::string, std::string, std::string, bool>> setting_keywords() {
  std::vector<std::tuple<std::string, std::string, std::string, bool>> out;
  for (const Setting& s : setting_table())
    out.emplace_back(s.python, s.field, s.kind == KnobKind::Switch ? "switch" : "text", s.rule.negated);
  return out;
}

}  // namespace
}  // namespace longctx::python

NB_MODULE(_core, m) {
  using namespace longctx::python;
  m.doc() = "longctx's planner (no LibTorch): requests in, the CLI's JSON out, errors as values";
  bind_request(m);
  m.def("max_context", &max_context_answer, nb::arg("cluster"), nb::arg("ladder"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("plan", &plan_answer, nb::arg("cluster"), nb::arg("seq"), nb::arg("knobs"), nb::arg("no_search"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("explain", &explain_answer, nb::arg("plan_json"), nb::arg("live_rows"));
  m.def("export", &export_answer, nb::arg("plan_json"), nb::arg("stack"));
  m.def("drift", &drift_answer, nb::arg("plan_json"));
  // The plan's prediction as this planner records it (`plan -o`'s "prediction" block), for a
  // plan file that leaves it out.
  m.def(
      "prediction",
      [](const std::string& plan_json) -> Answer {
        auto p = plan_of(plan_json);
        if (!p) return failure(p.error());
        return success(plan_to_json(with_phase_predictions(evaluate(*p)))["prediction"]);
      },
      nb::arg("plan_json"));
  // A file the user names, read as every longctx input is (common/input_file.h): a regular
  // file within the JSON bound, never a FIFO waited on or a device read. Its bytes, or the
  // error's JSON as an Answer's.
  m.def(
      "read_file",
      [](const std::string& path, const std::string& field) -> std::pair<bool, nb::bytes> {
        auto text = longctx::read_regular_file(path, field);
        if (!text) {
          const std::string e = failure(text.error()).second;
          return {false, nb::bytes(e.data(), e.size())};
        }
        return {true, nb::bytes(text->data(), text->size())};
      },
      nb::arg("path"), nb::arg("field"));
  m.def("exports", &exports_answer, nb::arg("plan_json"));
  m.def("positions", &positions_answer, nb::arg("plan_json"));
  // The bound on a JSON input (common/input_file.h input_limits::kJsonBytes), which
  // Plan.from_json holds text to as read_file holds a file.
  m.attr("max_json_bytes") = longctx::input_limits::kJsonBytes;
  m.def("compare", &compare_answer, nb::arg("plan_json"), nb::arg("trace_path"));
  m.def("model", &model_answer, nb::arg("request"));
  m.def("models", &longctx::model_preset_names);
  m.def("knob_keys", &knob_keys);
  m.def("settings", &setting_keywords);
  m.def("version", [] { return std::string(LONGCTX_VERSION); });
  // A file written as every longctx output is (common/atomic_file.h): whole or not at all,
  // through a symbolic link to the file it names, a device or folder refused, a temporary of
  // its own per writer. Plan.save's.
  m.def(
      "write_text",
      [](const std::string& path, const std::string& field, const std::string& text) -> Answer {
        auto written = longctx::write_text_atomically(path, field, text);
        if (!written) return failure(written.error());
        return {true, ""};
      },
      nb::arg("path"), nb::arg("field"), nb::arg("text"));
  // The footprint of PyTorch's ring attention on one rank (footprint/torch_ring_attention.h),
  // for the tests that hold it to torch itself. grad_out_bshd None: grad_out laid out as the
  // forward's output (ones_like(out)).
  m.def(
      "torch_ring_attention_memory",
      [](std::int64_t b, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t local_seq, std::int64_t head_dim,
         std::int64_t elem, int world, int rank, bool load_balance, const std::string& rotate, bool qkv_transposed,
         std::optional<bool> grad_out_bshd, bool cpu, std::int64_t cpu_threads) {
        namespace tr = longctx::footprint::torch_ring;
        tr::RingShape s{.b = b, .q_heads = q_heads, .kv_heads = kv_heads, .local_seq = local_seq, .head_dim = head_dim,
                        .elem = elem, .world = world, .rank = rank, .load_balance = load_balance,
                        .rotate = rotate == "alltoall" ? tr::Rotate::AllToAll : tr::Rotate::AllGather,
                        .qkv_transposed = qkv_transposed, .grad_out_bshd = true, .cpu = cpu, .cpu_threads = cpu_threads};
        s.grad_out_bshd = grad_out_bshd.value_or(tr::forward_output_bshd(s));
        const tr::RingMemory f = tr::forward_memory(s), g = tr::backward_memory(s);
        return std::map<std::string, std::int64_t>{{"forward_peak", f.peak}, {"forward_returned", f.returned},
                                                   {"backward_peak", g.peak}, {"backward_returned", g.returned}};
      },
      nb::arg("b"), nb::arg("q_heads"), nb::arg("kv_heads"), nb::arg("local_seq"), nb::arg("head_dim"), nb::arg("elem"),
      nb::arg("world"), nb::arg("rank"), nb::arg("load_balance"), nb::arg("rotate"), nb::arg("qkv_transposed"),
      nb::arg("grad_out_bshd").none(), nb::arg("cpu"), nb::arg("cpu_threads"));
}
