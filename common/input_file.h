#pragma once
// Reading an input file: the one way longctx reads what a user names (plan files, config.json,
// --gpu preset files, --trace, --data, checkpoint manifests and rank files). Each reader
// refuses, as BadInput naming the option (`field`) and the path:
//   - a path that does not exist or cannot be opened (a symbolic link loop: ELOOP);
//   - anything but a regular file: a folder, a FIFO (never waited on: opened O_NONBLOCK),
//     a character or block device (/dev/zero is never read), a socket;
//   - a file larger than the caller's limit (`max_bytes`), before reading it: a sparse or
//     runaway file cannot exhaust memory;
//   - for gzip files (read_text_file), text that inflates past the limit: inflation stops
//     there, so a small file that would inflate to gigabytes is refused after `max_bytes`.
#include <cstdint>
#include <string>

#include "common/result.h"

namespace longctx {

// Limits on what the readers read into memory; each is far above any real file of its kind.
namespace input_limits {
inline constexpr std::uint64_t kJsonBytes = std::uint64_t(64) << 20;    // plans, configs, presets: 64 MiB
inline constexpr std::uint64_t kTraceBytes = std::uint64_t(1) << 30;    // traces, after gunzip: 1 GiB
inline constexpr std::uint64_t kDataBytes = std::uint64_t(64) << 30;    // token files (--data): 64 GiB
}  // namespace input_limits

// The whole of a regular file of at most `max_bytes` bytes (see above).
Result<std::string> read_regular_file(const std::string& path, const std::string& field,
                                      std::uint64_t max_bytes = input_limits::kJsonBytes);

// The same, gunzipped when it is a gzip file (its first two bytes the gzip magic): the file
// and its inflated text are each held to `max_bytes`; a damaged or truncated gzip file is
// BadInput naming `field`.
Result<std::string> read_text_file(const std::string& path, const std::string& field,
                                   std::uint64_t max_bytes = input_limits::kTraceBytes);

// "a folder", "a FIFO", ...: what a file of mode `mode` (stat's st_mode) is, for messages.
const char* file_kind(unsigned mode);

}  // namespace longctx
