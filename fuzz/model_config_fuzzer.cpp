// Fuzzes the config.json reader: arbitrary bytes parsed as JSON, then model_from_json.
// Contract checked: no crash or undefined behaviour on any input, and an accepted model
// satisfies validate_model(), derives its parameter counts without overflow, and survives
// model_to_json -> model_from_json unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "contract.h"

#include "planner/core/model_config.h"

using longctx::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  const auto m = longctx::model_from_json(j, "fuzz");
  if (!m) return 0;
  if (auto v = longctx::validate_model(*m); !v) fail("model_from_json accepted what validate_model() refuses:", v.error().what());
  if (m->total_params() <= 0) fail("no parameters");
  const auto again = longctx::model_from_json(longctx::model_to_json(*m), "fuzz");
  if (!again) fail("a written model does not read back:", again.error().what());
  if (again->hidden != m->hidden || again->head_dim != m->head_dim || again->kv_heads != m->kv_heads ||
      again->vocab != m->vocab || again->layers != m->layers || again->qk_norm != m->qk_norm ||
      longctx::model_to_json(*again) != longctx::model_to_json(*m))  // biases, RoPE scaling, window, dtype too
    fail("a model changed on its way through model_to_json");
  if (longctx::rope_inverse_frequencies(*m).size() != static_cast<std::size_t>(m->head_dim / 2)) fail("RoPE frequencies");
  return 0;
}
