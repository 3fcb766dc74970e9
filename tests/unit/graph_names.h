#pragma once
// Step graphs looked up by name for planner tests.
#include <map>
#include <string>

#include "planner/graph/step_graph.h"

namespace longctx::testing {

// Each tensor's bytes by name (the first of a name).
inline std::map<std::string, std::int64_t> tensor_bytes(const StepGraph& g) {
  std::map<std::string, std::int64_t> out;
  for (const auto& t : g.tensors()) out.emplace(format(t.name), t.bytes);
  return out;
}

// The index of the first op named `name`, or -1.
inline int op_index(const StepGraph& g, const std::string& name) {
  for (std::size_t i = 0; i < g.ops().size(); ++i)
    if (format(g.ops()[i].name) == name) return static_cast<int>(i);
  return -1;
}

}  // namespace longctx::testing
