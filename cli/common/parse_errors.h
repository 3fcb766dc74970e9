#pragma once
// What longctx and longctx-runtime do with a command line CLI11 cannot parse: CLI11's own
// message, then the fix for the kinds of mistake whose message does not say it, and exit 2.
#include <csignal>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "planner/io/quoted_text.h"

namespace longctx::cli {

// Exit status for a parse error (0 for --help, 2 otherwise), after printing it and a fix.
// Printed as every error is: "longctx: error: " and the message (values in it escaped for the
// terminal), then the fix.
inline int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
  std::fprintf(stderr, "longctx: error: %s\n", terminal_text(e.what()).c_str());
  if (dynamic_cast<const CLI::ConversionError*>(&e))
    std::fputs("fix: write the value as a plain number in range (--steps 10, --seed 42); sizes take a unit: tokens K "
               "or M (128K), bytes KiB, MiB, GiB or TiB (80GiB)\n",
               stderr);
  else if (dynamic_cast<const CLI::ValidationError*>(&e))
    std::fputs("fix: give the value the option's help asks for (see --help)\n", stderr);
  else
    std::fputs("fix: see --help for the options and how often each is given\n", stderr);
  return 2;
}

// A write past the file-size limit (ulimit -f) fails with EFBIG, reported as an error with
// the file's name, instead of SIGXFSZ ending the process with a partial file.
inline void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

}  // namespace longctx::cli
