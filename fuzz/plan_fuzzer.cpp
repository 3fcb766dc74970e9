// Fuzzes the plan file reader as every command reads it: arbitrary bytes through
// plan_from_text (the nesting bound, the parse, plan_from_json with its unknown-key refusal
// and validate()). Seeds in fuzz/corpus/plan hold plans as `longctx plan -o` writes them, one
// nested 100,000 deep, one with misspelt keys and one with numbers past every bound.
// Contract checked: no crash, stack overflow or undefined behaviour on any input; an accepted
// plan is valid (validate()), so predict() may run on it, and it survives plan_to_json ->
// plan_from_text; a refusal names a field.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "contract.h"

#include "planner/core/plan.h"
#include "planner/io/plan_text.h"
#include "planner/search/memory_model.h"

using longctx::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto plan = longctx::plan_from_text(text, "plan");
  if (!plan) {
    if (plan.error().field.empty()) fail("a refusal names no field:", plan.error().message);
    return 0;
  }
  if (auto v = longctx::validate(*plan); !v)
    fail("plan_from_text accepted what validate() refuses:", v.error().what());
  const auto again = longctx::plan_from_text(longctx::plan_to_json(*plan).dump(), "plan");
  if (!again) fail("a written plan does not read back:", again.error().what());
  if (!(again->parallel == plan->parallel) || again->train.seq != plan->train.seq) fail("a plan changed on its way through the file");
  const longctx::Prediction pr = longctx::predict(*plan);
  if (pr.peak_device_bytes < 0 || pr.peak_host_bytes < 0) fail("negative peak");
  return 0;
}
