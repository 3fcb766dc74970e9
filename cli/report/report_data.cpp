#include "cli/report/report_data.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/core/json_fields.h"
#include "planner/core/knobs.h"
#include "planner/graph/allocator_model.h"

namespace longctx::cli {
namespace {

// Each distinct string once; entries refer to it by index.
class StringTable {
 public:
  int index(const std::string& s) {
    const auto [it, added] = ids_.emplace(s, static_cast<int>(ids_.size()));
    if (added) strings_.push_back(s);
    return it->second;
  }
  const std::vector<std::string>& strings() const { return strings_; }

 private:
  std::map<std::string, int> ids_;
  std::vector<std::string> strings_;
};

// A name as two indices: its scope ("layer.7.", "embed.", none) and the rest (format(Name)).
struct NameTables {
  StringTable prefixes, suffixes;
  void add(const Name& n, nlohmann::json& prefix_column, nlohmann::json& suffix_column) {
    prefix_column.push_back(prefixes.index(format(Name{n.scope, "", false})));
    suffix_column.push_back(suffixes.index(format(Name{Name::kNone, n.base, n.recompute})));
  }
};

// Each entry the difference from the one before (the first one absolute).
template <class Get>
nlohmann::json delta_column(std::size_t n, Get get) {
  nlohmann::json out = nlohmann::json::array();
  std::int64_t before = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t v = get(i);
    out.push_back(v - before);
    before = v;
  }
  return out;
}

nlohmann::json op_columns(const Evaluation& e, const MemoryTimeline& t, NameTables& names) {
  const std::size_t n = t.ops();
  const Backend backend = e.plan.cluster.hardware.backend;
  nlohmann::json ops = {{"count", n}, {"prefix", nlohmann::json::array()}, {"suffix", nlohmann::json::array()},
                        {"phase", nlohmann::json::array()}, {"workspace", nlohmann::json::array()}};
  for (const OpSpec& op : e.graph.ops()) {
    names.add(op.name, ops["prefix"], ops["suffix"]);
    ops["phase"].push_back(static_cast<int>(op.phase));
    ops["workspace"].push_back(allocated_bytes(backend, op.workspace_bytes));
  }
  ops["allocated"] = nlohmann::json::array();
  for (std::size_t c = 0; c < kCategories; ++c) ops["allocated"].push_back(delta_column(n, [&](std::size_t i) { return t.allocated[i][c]; }));
  ops["reserved"] = delta_column(n, [&](std::size_t i) { return t.reserved[i]; });
  ops["host_per_node"] = delta_column(n, [&](std::size_t i) { return t.host_per_node[i]; });
  return ops;
}

// Tensors in the graph's order; `first` delta-coded (mostly rising), `span` = last - first.
nlohmann::json tensor_columns(const Evaluation& e, NameTables& names) {
  nlohmann::json cols = {{"prefix", nlohmann::json::array()}, {"suffix", nlohmann::json::array()},
                         {"category", nlohmann::json::array()}, {"bytes", nlohmann::json::array()},
                         {"span", nlohmann::json::array()}};
  const std::vector<TensorLife> lives = device_tensor_lives(e);
  for (const TensorLife& l : lives) {
    const TensorSpec& t = e.graph.tensor(l.tensor);
    names.add(t.name, cols["prefix"], cols["suffix"]);
    cols["category"].push_back(static_cast<int>(t.category));
    cols["bytes"].push_back(l.bytes);
    cols["span"].push_back(l.last - l.first);
  }
  cols["first"] = delta_column(lives.size(), [&](std::size_t i) { return std::int64_t{lives[i].first}; });
  return cols;
}

nlohmann::json enum_names() {
  nlohmann::json out = {{"categories", nlohmann::json::array()}, {"phases", nlohmann::json::array()}};
  for (int c = 0; c < kCategories; ++c) out["categories"].push_back(to_string(static_cast<Category>(c)));
  for (const Phase p : {Phase::Forward, Phase::Loss, Phase::Backward, Phase::Optimizer}) out["phases"].push_back(to_string(p));
  return out;
}

}  // namespace

nlohmann::json report_data(const Evaluation& e, const MemoryTimeline& t, const nlohmann::json& ladder) {
  NameTables names;
  nlohmann::json j = enum_names();
  j["schema"] = "longctx.report/1";
  j["plan"] = plan_to_json(e.plan);
  j["backend"] = e.plan.cluster.hardware.backend == Backend::Cuda ? "cuda" : "cpu";
  j["binding_name"] = binding_figure_name(e.plan);
  j["context"] = t.context;
  j["peak_op"] = t.peak_op;
  j["peak_bytes"] = t.peak_bytes;
  j["ops"] = op_columns(e, t, names);
  j["tensors"] = tensor_columns(e, names);
  j["prefixes"] = names.prefixes.strings();
  j["suffixes"] = names.suffixes.strings();
  if (!ladder.is_null()) j["ladder"] = ladder;
  return j;
}

Result<nlohmann::json> plan_file_ladder(const std::string& path) {
  using namespace json_fields;
  LONGCTX_TRY(auto text, read_file(path, "--plan"));
  LONGCTX_TRY(auto file, parse(text, path));
  const auto it = file.find("ladder");
  if (it == file.end()) return nlohmann::json(nullptr);
  if (!it->is_array()) return Error::bad_input("ladder", "must be an array of {techniques, max_tokens, binding}, as max-context --json writes it");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const auto& rung = (*it)[i];
    const std::string field = fmt::format("ladder[{}]", i);
    if (!rung.is_object()) return Error::bad_input(field, "must be an object {techniques, max_tokens, binding}");
    if (auto tokens = get_int(rung, field, "max_tokens", 0); !tokens) return tokens.error();
    if (auto binding = get_string(rung, field, "binding"); !binding) return binding.error();
    const auto techniques = rung.find("techniques");
    if (techniques == rung.end() || !techniques->is_array())
      return Error::bad_input(field + ".techniques", "must be an array of technique names");
    // The names max-context writes (technique_names): another would be drawn as a rung of
    // techniques no search ran.
    static const std::vector<std::string> known = technique_names(all_techniques());
    for (const auto& name : *techniques) {
      if (!name.is_string()) return Error::bad_input(field + ".techniques", fmt::format("must hold names, found {}", name.dump()));
      if (std::find(known.begin(), known.end(), name.get<std::string>()) == known.end())
        return Error::bad_input(field + ".techniques", fmt::format("{} is not a technique longctx names (the techniques: "
                                                                   "{}); write the ladder again with max-context --json",
                                                                   name.dump(), fmt::join(known, ", ")));
    }
  }
  return *it;
}

}  // namespace longctx::cli
