#pragma once
// Chrome trace event JSON of a run (Perfetto and chrome://tracing open it): a complete
// event ("X") per phase and layer of every step, and counter events ("C") for device and
// host bytes at each phase boundary and at each phase's peak.
#include <string>

#include "longctx/runtime/runner.h"

namespace longctx::runtime {

std::string chrome_trace_json(const RunReport& r);

}  // namespace longctx::runtime
