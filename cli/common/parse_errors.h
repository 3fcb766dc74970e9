#pragma once
// What longctx and longctx-runtime do with a command line CLI11 cannot parse: CLI11's own
// message, then the fix for the kinds of mistake whose message does not say it, and exit 2.
#include <csignal>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/io/quoted_text.h"

namespace longctx::cli {

// CLI11's message in longctx's words where CLI11's own misleads: a repeated option, arguments
// the command does not take (CLI11 lists them last first), a number out of its type's range.
inline std::string parse_error_message(const CLI::ParseError& e) {
  const std::string what = e.what();
  constexpr std::string_view repeated = ": At Most 1 required but received ";
  if (const auto at = what.find(repeated); at != std::string::npos)
    return fmt::format("{}: given {} times; give it once", what.substr(0, at), what.substr(at + repeated.size()));
  // One stray argument and several have their own heads; either way the arguments lead, as
  // the field every error names first.
  for (const std::string head : {"The following arguments were not expected: ", "The following argument was not expected: "}) {
    if (what.rfind(head, 0) != 0) continue;
    std::vector<std::string> words;
    std::istringstream in(what.substr(head.size()));
    for (std::string w; in >> w;) words.insert(words.begin(), w);
    return fmt::format("{}: this command takes no such argument{}", fmt::join(words, " "), words.size() == 1 ? "" : "s");
  }
  if (const std::string head = "Could not convert: "; what.rfind(head, 0) == 0) {
    const std::string rest = what.substr(head.size());
    if (const auto eq = rest.find(" = "); eq != std::string::npos)
      return fmt::format("{}: '{}' is not a whole number in the option's range", rest.substr(0, eq), rest.substr(eq + 3));
  }
  return what;
}

// Exit status for a parse error (0 for --help, 2 otherwise), after printing it and a fix.
// Printed as every error is: "longctx: error: " and the message (values in it escaped for the
// terminal), then the fix.
inline int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
  std::fprintf(stderr, "longctx: error: %s\n", terminal_text(parse_error_message(e)).c_str());
  if (dynamic_cast<const CLI::ConversionError*>(&e))
    std::fputs("fix: write the value as a plain number in range (see --help); sizes take a unit: tokens K or M (128K), "
               "bytes KiB, MiB, GiB or TiB (80GiB)\n",
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
