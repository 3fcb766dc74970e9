#pragma once
// What a command's exit status becomes when its answer could not be written to standard
// output (a full disk behind a redirection, `> /dev/full`): an error naming the cause and
// exit 1, never an answer lost with status 0 nor an abort. fmt::print throws std::system_error
// when its write fails (format-inl.h, fwrite_fully); printf and fputs leave the stream's error
// flag set, and buffered text may fail only when it is flushed, so the stream is flushed and
// checked once the command is done.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "cli/common/commands.h"

namespace longctx::cli {

inline int report_standard_output_failure(const char* cause) {
  std::fprintf(stderr, "longctx: error: writing the answer to standard output failed: %s\n", cause);
  std::fputs("fix: send the output where it can be written (free space, or another file or pipe)\n", stderr);
  return 1;
}

// Runs the command, then flushes standard output. REQUIRES: the command writes its answer to
// stdout through stdio or fmt (every command does).
inline int run_to_standard_output(const Command& c) {
  int status = 0;
  try {
    status = c.run();
  } catch (const std::system_error& e) {
    if (!std::ferror(stdout)) throw;  // not a write to stdout: not this function's to explain
    return report_standard_output_failure(e.code().message().c_str());
  }
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return report_standard_output_failure(errno != 0 ? std::strerror(errno) : "the stream reported an error");
  return status;
}

}  // namespace longctx::cli
