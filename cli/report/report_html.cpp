#include "cli/report/report_html.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/report/markup_text.h"
#include "planner/core/units.h"
#include "cli/report/report_data.h"

namespace longctx::cli {
namespace {

// JSON inside a <script> element: no '<' at all, so no "</script>" can end it early (in JSON
// text '<' appears only inside strings, where \u003c reads back the same).
std::string script_safe_json(const nlohmann::json& j) {
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

void replace_once(std::string& page, std::string_view marker, const std::string& with) {
  const auto at = page.find(marker);
  if (at != std::string::npos) page.replace(at, marker.size(), with);
}

}  // namespace

std::string report_html(const Evaluation& e, const nlohmann::json& ladder) {
  const MemoryTimeline t = memory_timeline(e);
  std::string page(report_page_template());
  const std::string title = fmt::format("longctx: {}, {} tokens on {} x {}", e.plan.model.name, format_tokens(e.plan.train.seq),
                                        e.plan.cluster.shape.world(), e.plan.cluster.hardware.name);
  // The data last: nothing in it is read as a marker.
  replace_once(page, "%%LONGCTX_TITLE%%", escape_markup(title));
  replace_once(page, "%%LONGCTX_DATA%%", script_safe_json(report_data(e, t, ladder)));
  return page;
}

}  // namespace longctx::cli
