#pragma once
// Chrome trace event JSON of a run (Perfetto and chrome://tracing open it): a complete
// event ("X") per phase and layer of every step, and two counter tracks ("C") of device and
// host bytes: "live bytes" at each phase boundary, and "phase peak bytes", each phase's peak
// from its start. otherData names the plan run (TraceIdentity), so `compare` can refuse a
// trace of another plan.
#include <string>

#include "planner/io/measured_trace.h"
#include "longctx/runtime/runner.h"

namespace longctx::runtime {

std::string chrome_trace_json(const RunReport& r, const TraceIdentity& identity = {});

}  // namespace longctx::runtime
