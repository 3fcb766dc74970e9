#pragma once
// Strings as the export files write them: every string that reaches an exported file (a
// model name from a plan or a --model folder's name, a hardware name) passes through one of
// these, so no byte of it can end a quoted value or a comment line and start a key of its
// own. Bytes that are not UTF-8 become U+FFFD; what the format cannot hold raw is escaped.
#include <string>
#include <string_view>

namespace longctx {

// A YAML double-quoted scalar: `"`, `\`, C0 and C1 controls, DEL, U+2028/U+2029, U+FEFF and
// anything else outside YAML's printable set escaped (\n, \t, \xNN, \uNNNN).
std::string yaml_quoted(std::string_view text);

// A TOML basic string: `"`, `\` and every control character (U+0000 to U+001F, U+007F to
// U+009F) escaped (\n, \t, \uNNNN), everything else raw UTF-8.
std::string toml_quoted(std::string_view text);

// One line of a comment (after "# "): the YAML escapes without the quotes, so a newline in a
// name shows as the two characters \n and the comment stays one line.
std::string comment_text(std::string_view text);

// Text for a terminal (error messages that echo a flag's value or a folder's name): control
// bytes other than newline and tab (ESC above all, which would drive the terminal), DEL, C1
// controls and bytes that are not UTF-8 written as \xNN escapes.
std::string terminal_text(std::string_view text);

// A name from a file (a model's, a hardware preset's) on one line of a text answer: as
// terminal_text, newline and tab escaped too (\x0A, \x09), so a name cannot drive the terminal
// nor add a line of its own to the answer.
std::string terminal_line(std::string_view text);

}  // namespace longctx
