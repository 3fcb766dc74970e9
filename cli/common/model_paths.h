#pragma once
// The files a --model option reads, which an output (-o) may not replace
// (check_distinct_output): a plan or preset written over them would be read as the model.
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "planner/core/model_config.h"

namespace longctx::cli {

// --model as given and, where it names a folder or a cached Hub id, the config.json read from
// it (model_config_file), which the option does not spell out.
inline std::vector<NamedPath> model_input_paths(const std::string& model) {
  std::vector<NamedPath> paths = {{model, "--model"}};
  if (const std::string file = model_config_file(model); !file.empty() && file != model)
    paths.push_back({file, "--model's config.json"});
  return paths;
}

}  // namespace longctx::cli
