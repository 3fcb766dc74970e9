#pragma once
// What `explain --html` embeds in its page: the plan, its per-op memory timeline
// (memory_timeline.h) and the device tensors' lives, as compact columns (a 70B plan has ten
// thousand ops and more tensors: no per-op objects with repeated keys).
//
// Layout (docs/cli.md, explain --html): names as indices into "prefixes" (the layer, embed.
// or head.) and "suffixes"; per-op byte columns delta-coded (each entry the difference from
// the op before, the first one absolute), since most categories change at few ops.
#include <nlohmann/json.hpp>

#include "cli/report/memory_timeline.h"

namespace longctx::cli {

// `ladder`: the plan file's ladder (plan_file_ladder), or null when it has none.
nlohmann::json report_data(const Evaluation& e, const MemoryTimeline& t, const nlohmann::json& ladder);

// The ladder a plan file carries, written beside the plan's keys in the form `max-context
// --json` gives it ("ladder": [{"techniques": [...], "max_tokens": N, "binding": "..."}]);
// null when the file has none. BadInput naming the field ("ladder[2].max_tokens") when it is
// malformed.
Result<nlohmann::json> plan_file_ladder(const std::string& path);

}  // namespace longctx::cli
