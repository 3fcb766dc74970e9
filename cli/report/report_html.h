#pragma once
// `explain --html`: one self-contained page (its style and script inline, the plan's data
// embedded as JSON, report_data.h; no request leaves it) with the per-op device memory
// stacked as allocated by category, the allocator's reserve and the context, so that the
// binding figure is the height the eye sees; hover shows an op's figures and the tensors live
// there; drag or wheel zooms; then the plan's knobs and, where the plan file carries one, the
// ladder.
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "planner/search/memory_model.h"

namespace longctx::cli {

// `ladder`: the plan file's (plan_file_ladder), or null.
std::string report_html(const Evaluation& e, const nlohmann::json& ladder);

// The page around the data: report_page.html, compiled in (cli/CMakeLists.txt).
std::string_view report_page_template();

}  // namespace longctx::cli
