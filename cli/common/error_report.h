#pragma once
// How longctx and longctx-runtime print an error a command returns (docs/cli.md): one line,
// "longctx: error: FIELD: MESSAGE", the values it echoes escaped for the terminal (a model
// name or a path may hold control bytes), then the exit status its kind has (units.h:
// 2 bad input, 3 no plan fits, 1 anything else).
#include <cstdio>

#include <fmt/format.h>

#include "common/result.h"
#include "planner/io/quoted_text.h"

namespace longctx::cli {

inline int report_error(const Error& e) {
  // The field on the line's own terms: a key read from a file may hold a newline, which would
  // end the line inside the field's name.
  if (e.field.empty()) fmt::print(stderr, "longctx: error: {}\n", terminal_text(e.message));
  else fmt::print(stderr, "longctx: error: {}: {}\n", terminal_line(e.field), terminal_text(e.message));
  return exit_status(e.kind);
}

}  // namespace longctx::cli
