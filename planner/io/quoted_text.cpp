#include "planner/io/quoted_text.h"

#include <cstdint>

#include <fmt/format.h>

namespace longctx {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// The code point starting at text[i], advancing i; kReplacement (one byte consumed) for a
// byte that does not start a well-formed UTF-8 sequence (overlong forms and surrogates too).
char32_t next_code_point(std::string_view text, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = byte(i);
  int extra = 0;
  char32_t cp = 0, min = 0;
  if (b < 0x80) { ++i; return b; }
  if ((b & 0xE0) == 0xC0) { extra = 1; cp = b & 0x1F; min = 0x80; }
  else if ((b & 0xF0) == 0xE0) { extra = 2; cp = b & 0x0F; min = 0x800; }
  else if ((b & 0xF8) == 0xF0) { extra = 3; cp = b & 0x07; min = 0x10000; }
  else { ++i; return kReplacement; }
  if (i + extra >= text.size()) { ++i; return kReplacement; }
  for (int k = 1; k <= extra; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) { ++i; return kReplacement; }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { ++i; return kReplacement; }
  i += extra + 1;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The one-character escapes YAML, TOML and JSON share.
const char* short_escape(char32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    default: return nullptr;
  }
}

// YAML 1.1's printable set (PyYAML's Reader.NON_PRINTABLE, inverted), less the line and
// paragraph separators and the byte order mark, which readers treat specially.
bool yaml_printable(char32_t cp) {
  if (cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF) return false;
  return (cp >= 0x20 && cp <= 0x7E) || (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
         (cp >= 0x10000 && cp <= 0x10FFFF);
}

// `quoted`: inside double quotes, where '"' and '\' are escaped too (a comment keeps them).
std::string yaml_body(std::string_view text, bool quoted) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = next_code_point(text, i);
    const char* e = short_escape(cp);
    if (e && (quoted || (cp != '"' && cp != '\\'))) out += e;
    else if (yaml_printable(cp)) append_utf8(out, cp);
    else if (cp <= 0xFF) out += fmt::format("\\x{:02X}", static_cast<unsigned>(cp));
    else out += fmt::format("\\u{:04X}", static_cast<unsigned>(cp));
  }
  return out;
}

}  // namespace

std::string yaml_quoted(std::string_view text) { return "\"" + yaml_body(text, true) + "\""; }

std::string toml_quoted(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = next_code_point(text, i);
    if (const char* e = short_escape(cp)) out += e;
    else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) out += fmt::format("\\u{:04X}", static_cast<unsigned>(cp));
    else append_utf8(out, cp);
  }
  return out + "\"";
}

std::string comment_text(std::string_view text) { return yaml_body(text, false); }

namespace {

// terminal_text, with newline and tab kept raw or escaped.
std::string escaped_for_terminal(std::string_view text, bool keep_line_breaks) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t start = i;
    const char32_t cp = next_code_point(text, i);
    const bool invalid = cp == kReplacement && (i - start == 1) && static_cast<unsigned char>(text[start]) >= 0x80;
    const bool kept = keep_line_breaks && (cp == '\n' || cp == '\t');
    if (invalid || (cp < 0x20 && !kept) || (cp >= 0x7F && cp <= 0x9F)) {
      for (std::size_t k = start; k < i; ++k) out += fmt::format("\\x{:02X}", static_cast<unsigned char>(text[k]));
    } else {
      out.append(text.substr(start, i - start));
    }
  }
  return out;
}

}  // namespace

std::string terminal_text(std::string_view text) { return escaped_for_terminal(text, true); }

std::string terminal_line(std::string_view text) { return escaped_for_terminal(text, false); }

}  // namespace longctx
