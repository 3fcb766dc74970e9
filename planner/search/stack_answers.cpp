#include "planner/search/stack_answers.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "planner/io/export.h"
#include "planner/stacks/profile.h"

namespace longctx {

namespace {

// The request as one stack takes it: the options of other stacks (--hf-loss for the hf
// stack's row) left at their defaults, so an option given for one row is not refused by the
// others (the headline's longctx row refused --hf-loss, failing the whole answer).
ClusterRequest for_stack(const ClusterRequest& r, const StackProfile& s) {
  ClusterRequest one = r;
  one.stack = s.name;
  const auto takes = [&](SettingId id) {
    return setting(id).rule.option == nullptr || std::find(s.options.begin(), s.options.end(), id) != s.options.end();
  };
#define LONGCTX_FOREIGN_OPTION_DEFAULT(field, Type, member, rule) \
  if (!takes(SettingId::field)) one.field = {};
  LONGCTX_SETTING_TABLE(LONGCTX_FOREIGN_OPTION_DEFAULT)
#undef LONGCTX_FOREIGN_OPTION_DEFAULT
  return one;
}

}  // namespace

std::vector<StackAnswer> answer_max_context_per_stack(const ClusterRequest& r, bool with_ladder,
                                                      const StackProgress& progress) {
  std::vector<StackAnswer> out;
  for (const StackProfile* s : stack_profiles()) {
    if (progress) progress(out.size(), stack_profiles().size(), s->name);
    auto a = answer_max_context(for_stack(r, *s), with_ladder && out.empty());
    if (a) out.push_back({s->name, std::move(*a), std::nullopt});
    else out.push_back({s->name, std::nullopt, a.error()});
  }
  return out;
}

nlohmann::json max_context_answer_json(const MaxContextResult& r) {
  nlohmann::json j = max_context_json(r);
  j["exports"] = exports_json(r.plan);
  return j;
}

nlohmann::json plan_answer_json(const PlanAnswer& a, bool no_search) {
  nlohmann::json j = plan_to_json(a.recorded);
  j["search"] = no_search ? no_search_json() : search_summary_json(a.found);
  j["exports"] = exports_json(a.recorded);
  if (const std::string note = max_positions_note(a.recorded.model, a.recorded.train.seq); !note.empty())
    j["positions"] = note;
  return j;
}

nlohmann::json stack_answers_json(const std::vector<StackAnswer>& all) {
  nlohmann::json out = nlohmann::json::array();
  for (const StackAnswer& a : all) {
    if (!a.answer) {
      out.push_back({{"stack", a.stack}, {"refusal", {{"field", a.refusal->field}, {"message", a.refusal->message}}}});
      continue;
    }
    nlohmann::json j = max_context_answer_json(*a.answer);
    j.erase("ladder");
    j["stack"] = a.stack;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace longctx
