// Fuzzes the plan file reader: arbitrary bytes parsed as JSON, then plan_from_json.
// Contract checked: no crash or undefined behaviour on any input; an accepted plan is valid
// (validate()), so predict() may run on it, and it survives plan_to_json -> plan_from_json.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "contract.h"

#include "planner/search/memory_model.h"
#include "planner/core/plan.h"

using longctx::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  const auto plan = longctx::plan_from_json(j);
  if (!plan) return 0;
  if (auto v = longctx::validate(*plan); !v)
    fail("plan_from_json accepted what validate() refuses:", v.error().what());
  const auto again = longctx::plan_from_json(longctx::plan_to_json(*plan));
  if (!again) fail("a written plan does not read back:", again.error().what());
  if (!(again->parallel == plan->parallel) || again->train.seq != plan->train.seq) fail("a plan changed on its way through the file");
  const longctx::Prediction pr = longctx::predict(*plan);
  if (pr.peak_device_bytes < 0 || pr.peak_host_bytes < 0) fail("negative peak");
  return 0;
}
