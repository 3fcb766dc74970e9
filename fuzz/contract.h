#pragma once
// What every fuzz target does when the code under test breaks a contract.
#include <cstdio>
#include <cstdlib>
#include <string>

namespace longctx::fuzz {

// Says which contract broke, then aborts so libFuzzer keeps the input.
[[noreturn]] inline void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "contract broken: %s %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace longctx::fuzz
