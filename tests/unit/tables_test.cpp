// The knob and settings tables and the stack registry as the rest of longctx reads them: the
// technique words come from the knob rows in their listed order, the search tunes fine the
// rows marked so, each setting has one flag, plan-file key and Python keyword, the stack
// words are the registry's, and validate() is one validation: a plan file the command line
// would refuse is refused alike, naming the plan's field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/core/knobs.h"
#include "planner/core/settings.h"
#include "planner/search/request.h"
#include "planner/search/search_space.h"
#include "planner/stacks/profile.h"

namespace longctx {
namespace {

TEST(KnobTable, TechniqueWordsComeFromTheRowsInTheirListedOrder) {
  // The order --help, error messages and the max-context ladder list them in.
  const std::vector<std::string> words = {"zero1",   "zero2",      "zero3",
                                          "offload-optimizer", "offload-params", "ulysses",
                                          "untied",  "checkpoint", "offload-checkpoints",
                                          "tiled-mlp", "tiled-loss", "ring"};
  EXPECT_EQ(technique_names(all_techniques()), words);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const TechniqueSet one = parse_techniques(words[i]).value();
    EXPECT_EQ(one.count(), 1u) << words[i];
    EXPECT_TRUE(one.test(i)) << words[i];
  }
  // Each of a row's words is the technique of one value; the last one of every value beyond.
  EXPECT_EQ(technique_for(KnobId::sharding, 2), Technique::Zero2);
  EXPECT_EQ(technique_for(KnobId::checkpoint, kCheckpointOps), Technique::Checkpoint);
  EXPECT_EQ(technique_for(KnobId::ulysses, 8), Technique::Ulysses);
  EXPECT_EQ(technique_for(KnobId::ulysses, 1), std::nullopt);
  EXPECT_EQ(technique_for(KnobId::micro_batch, 4), std::nullopt);
  // The gathered ring exchange needs the ring's word.
  EXPECT_EQ(technique_for(KnobId::ring_exchange, 1), Technique::Ring);
}

TEST(KnobTable, TheSearchTunesTheRowsMarkedFine) {
  std::vector<KnobId> marked;
  for (const Knob& k : knob_table())
    if (k.rule.fine) marked.push_back(k.id);
  EXPECT_EQ(fine_knobs(), marked);
  ASSERT_EQ(marked.size(), kFineKnobs);
  // with_fine sets exactly those rows, and their plain values are the fastest plan's.
  Plan p;
  p.parallel.sharding = Sharding::Zero3;
  FineValues fine{};
  for (std::size_t i = 0; i < kFineKnobs; ++i) fine[i] = knob(marked[i]).plain + 1;
  const Plan tuned = with_fine(p, fine);
  for (std::size_t i = 0; i < kFineKnobs; ++i) EXPECT_EQ(knob_value(tuned, marked[i]), fine[i]);
  EXPECT_EQ(tuned.parallel.sharding, Sharding::Zero3);
  EXPECT_EQ(with_fine(tuned, plain_fine()).parallel, p.parallel);
}

TEST(SettingsTable, EachRowHasOneFlagPlanKeyAndPythonKeyword) {
  const Setting& mask = setting(SettingId::hf_no_attention_mask);
  EXPECT_EQ(mask.flag, "--hf-no-attention-mask");
  EXPECT_EQ(mask.key, "train.stack.attention_mask");
  EXPECT_EQ(mask.python, "hf_attention_mask");
  const Setting& cache = setting(SettingId::hf_no_use_cache);
  EXPECT_EQ(cache.flag, "--hf-no-use-cache");
  EXPECT_EQ(cache.key, "train.stack.use_cache");
  EXPECT_EQ(cache.python, "hf_use_cache");
  EXPECT_EQ(setting(SettingId::grad_dtype).key, "train.grad_dtype");
  EXPECT_EQ(plan_key_of_flag("--sharding"), "parallel.sharding");
  EXPECT_EQ(plan_key_of_flag("--micro-batch"), "train.micro_batch");
  EXPECT_EQ(plan_key_of_flag("--attention"), "train.stack.attention");
  EXPECT_EQ(plan_key_of_flag("--seq"), "train.seq");
  // Every row's value of a default plan reads back from its text.
  const TrainConfig t;
  for (const Setting& s : setting_table()) {
    const KnobValue v = setting_value(t, s.id);
    EXPECT_EQ(parse_setting(s.id, format_setting(s.id, v), s.key).value(), v) << s.field;
  }
  EXPECT_EQ(parse_setting(SettingId::attention, "flash", "--attention").error().field, "--attention");
}

TEST(StackRegistry, TheStackWordsAndDefaultsAreTheProfiles) {
  for (const StackProfile* s : stack_profiles()) {
    EXPECT_EQ(parse_stack_kind(s->name, "--stack").value(), s->kind);
    EXPECT_EQ(to_string(s->kind), s->name);
    EXPECT_EQ(default_stack(s->kind).kind, s->kind) << s->name;
    for (const SettingId id : s->options) EXPECT_NE(setting(id).rule.option, nullptr) << s->name;
  }
  EXPECT_EQ(stacks_taking(SettingId::attention), "--stack hf or --stack arctic");
  const auto unknown = parse_stack_kind("megatron", "--stack");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("longctx, hf, arctic, torchtitan"), std::string::npos) << unknown.error().message;
}

PlanRequest no_search(const char* model, const char* gpu, const char* stack) {
  PlanRequest r;
  r.cluster.model = model;
  r.cluster.gpus = 1;
  r.cluster.gpu = gpu;
  r.cluster.stack = stack;
  r.seq = "512";
  r.no_search = true;
  return r;
}

// The same configuration from the command line and from a plan file: refused by the same
// rule, named by the flag there and by the plan's field here.
TEST(Validate, APlanFileTheCommandLineRefusesIsRefusedNamingItsField) {
  const nlohmann::json cpu = hardware_to_json(load_hardware("cpu").value());
  struct Case {
    const char* flag;
    const char* key;
    PlanRequest request;
    void (*refused)(PlanRequest&);
    void (*edit)(nlohmann::json&, const nlohmann::json& cpu);
  };
  const Case cases[] = {
      {"--sharding", "parallel.sharding", no_search("tiny-gqa", "cpu", "longctx"),
       [](PlanRequest& r) { r.knobs.sharding = Sharding::Zero1; },
       [](nlohmann::json& j, const nlohmann::json&) { j["parallel"]["sharding"] = "zero1"; }},
      {"--offload-checkpoints", "parallel.offload_checkpoints", no_search("tiny-gqa", "cpu", "hf"),
       [](PlanRequest& r) { r.knobs.checkpoint = CheckpointPolicy::full(); r.knobs.offload_checkpoints = true; },
       [](nlohmann::json& j, const nlohmann::json&) {
         j["parallel"]["checkpoint"] = "full";
         j["parallel"]["offload_checkpoints"] = true;
       }},
      {"--attention", "train.stack.attention", no_search("tiny-gqa", "cpu", "hf"),
       [](PlanRequest& r) { r.cluster.attention = "flash_attention_2"; },
       [](nlohmann::json& j, const nlohmann::json&) { j["train"]["stack"]["attention"] = "flash_attention_2"; }},
      {"--gpu", "cluster.hardware", no_search("llama-3.2-1b", "h100-80gb", "arctic"),
       [](PlanRequest& r) { r.cluster.gpu = "cpu"; r.cluster.dtype = "bf16"; },
       [](nlohmann::json& j, const nlohmann::json& cpu) { j["cluster"]["hardware"] = cpu; }},
      {"--expandable-segments", "cluster.expandable_segments", no_search("tiny-gqa", "cpu", "longctx"),
       [](PlanRequest& r) { r.cluster.expandable_segments = true; },
       [](nlohmann::json& j, const nlohmann::json&) { j["cluster"]["expandable_segments"] = true; }},
  };
  for (const Case& c : cases) {
    const auto fine = answer_plan(c.request);
    ASSERT_TRUE(fine.ok()) << c.flag << ": " << fine.error().what();
    PlanRequest refused = c.request;
    c.refused(refused);
    const auto from_flags = answer_plan(refused);
    ASSERT_FALSE(from_flags.ok()) << c.flag;
    EXPECT_EQ(from_flags.error().field, c.flag);
    nlohmann::json j = plan_to_json(fine.value().recorded);
    c.edit(j, cpu);
    const auto from_file = plan_from_json(j);
    ASSERT_FALSE(from_file.ok()) << c.key;
    EXPECT_EQ(from_file.error().field, c.key);
    EXPECT_EQ(from_file.error().message, from_flags.error().message) << c.key;
  }
}

// Candidates hold each value to its row's own rules only; what spans rows (here the arctic
// stack's huggingface model, which takes no Ulysses degree) is validate()'s, once a choice.
TEST(KnobCandidates, EachValueMeetsItsRowsRulesAndTheChoiceTheRest) {
  PlanRequest r = no_search("llama-3.1-8b", "h100-80gb", "arctic");
  r.cluster.gpus = 8;
  r.cluster.arctic_model = "huggingface";
  r.seq = "16K";
  const Plan p = answer_plan(r).value().recorded;
  const std::vector<KnobValue> degrees = knob_candidates(KnobId::ulysses, p, all_techniques(), {});
  EXPECT_EQ(degrees, (std::vector<KnobValue>{1, 2, 4, 8}));  // the divisors of 8 the heads take
  Plan eight = p;
  eight.parallel.ulysses = 8;
  EXPECT_EQ(validate(eight).error().field, "--ulysses");
  r.no_search = false;
  EXPECT_EQ(answer_plan(r).value().recorded.parallel.ulysses, 1);
  // A stack is offered none of what it cannot run, whatever the request allows.
  PlanRequest hf = no_search("tiny-gqa", "cpu", "hf");
  Plan h = answer_plan(hf).value().recorded;
  h.parallel.checkpoint = CheckpointPolicy::full();  // what checkpoint offload needs: met, but not on the CPU
  EXPECT_EQ(knob_candidates(KnobId::head_chunk, h, all_techniques(), {}), std::vector<KnobValue>{0});
  EXPECT_EQ(knob_candidates(KnobId::offload_checkpoints, h, all_techniques(), {}), std::vector<KnobValue>{0});
}

}  // namespace
}  // namespace longctx
