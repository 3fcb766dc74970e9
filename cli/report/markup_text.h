#pragma once
// Text placed inside the SVG and HTML that explain writes: model and op names come from the
// plan file, and a '<' or '&' in one must read as itself, not as markup.
#include <string>
#include <string_view>

namespace longctx::cli {

inline std::string escape_markup(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace longctx::cli
