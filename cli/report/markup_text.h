#pragma once
// Text placed inside the SVG and HTML that explain writes: model and op names come from the
// plan file, and a '<' or '&' in one must read as itself, not as markup. XML 1.0 allows no
// control character but tab, newline and carriage return, not even as a character reference,
// and no byte that is not UTF-8: one such byte in a name left the SVG malformed, which a
// browser refuses to draw. They are written as the visible escapes a text answer shows
// (terminal_line: \x1B), on the one line the name is drawn on.
#include <string>
#include <string_view>

#include "planner/io/quoted_text.h"

namespace longctx::cli {

inline std::string escape_markup(std::string_view s) {
  std::string out;
  for (char c : terminal_line(s)) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace longctx::cli
