#pragma once
// Files written whole or not at all: the one way longctx puts a file in place (plans, SVGs,
// checkpoint manifests and rank files). The contents go to a temporary name in the same
// folder, are flushed to disk, and are renamed over the final name; the folder's entry is
// flushed too. A reader therefore sees the old file or the new one, never a part.
#include <functional>
#include <string>
#include <string_view>

#include "longctx/planner/result.h"

namespace longctx {

// Writes `path` through `write(fd)`, which writes the contents to the open file and returns
// false on failure (with errno set). Errors name `field` (the option the path came from):
// BadInput when the temporary cannot be created (the folder is missing or not writable),
// Internal when writing, flushing or renaming fails (a full disk); in every error case the
// temporary is removed and `path` is untouched.
Result<bool> write_file_atomically(const std::string& path, const std::string& field,
                                   const std::function<bool(int fd)>& write);

// The same for contents already in memory.
Result<bool> write_text_atomically(const std::string& path, const std::string& field, std::string_view text);

// write(2) until all n bytes are written; false on an error other than EINTR.
bool write_all(int fd, const void* data, std::size_t n);

// fsync of a folder, so that a rename in it survives a crash.
bool sync_dir(const std::string& dir);

}  // namespace longctx
