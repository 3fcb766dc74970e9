#pragma once
// The plan file `explain` and `export` take as their argument (`longctx explain PLAN`):
// read as every plan file is (read_plan_file), its errors naming that argument, `plan`,
// where the reader names the option `compare` and `run` take it with (--plan).
#include <string>

#include "common/result.h"

namespace longctx::cli {

// `from`: the error of reading the plan file. Returns it naming the argument.
inline Error as_plan_argument(Error from) {
  if (from.field == "--plan") from.field = "plan";
  return from;
}

}  // namespace longctx::cli
