#pragma once
// Files written whole or not at all: the one way longctx puts a file in place (plans, SVGs,
// traces, allocation logs, checkpoint manifests and rank files). The contents go to a
// temporary name in the same folder, are flushed to disk, and are renamed over the final
// name; the folder's entry is flushed too. A reader therefore sees the old file or the new
// one, never a part, and no temporary survives an error.
//
// What a path may name:
//   - a regular file, or nothing yet: written as above; an existing file keeps its mode;
//   - a symbolic link: followed (the file it names is replaced, the link stays);
//   - /dev/stdout, /dev/stderr (or /dev/fd/1, /dev/fd/2): written in place, since a
//     stream cannot be renamed over; a failed write is still an error;
//   - anything else (a folder, a device such as /dev/null or /dev/full, a FIFO, a socket):
//     refused (BadInput), never replaced by a regular file.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace longctx {

// One file being written. Move-only; destroying it before commit() removes the temporary.
class AtomicFile {
 public:
  // Resolves `path` (above) and opens its temporary. Errors name `field` (the option the
  // path came from): BadInput for a path that is not a writable regular file (a folder, a
  // device, a FIFO, a missing or read-only folder, a symlink loop).
  static Result<AtomicFile> open(const std::string& path, const std::string& field);

  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&& o) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }  // as given
  // write(2) of all n bytes; false (with the cause kept for commit's error) on failure.
  bool write(const void* data, std::size_t n);
  // Records a failure the caller saw itself (a FILE* on fd() whose flush failed): commit()
  // will fail with this cause.
  void fail(int err) { if (!failed_errno_) failed_errno_ = err; }
  // Whether a write has failed: commit() will fail. A command writing several files checks
  // them all before committing any, so that one failed write leaves none of them.
  bool failed() const { return failed_errno_ != 0; }

  // Flushes, renames into place and flushes the folder. Errors (Internal, naming the path
  // and the cause, e.g. "No space left on device"): any failed write, fsync, close or
  // rename; the temporary is removed and the final name is untouched.
  Result<bool> commit();

 private:
  AtomicFile() = default;
  void discard();

  int fd_ = -1;
  std::string path_;    // as given (messages)
  std::string target_;  // the final name after following links; empty: written in place
  std::string tmp_;     // the temporary; empty when written in place
  std::string field_;
  int failed_errno_ = 0;
};

// Writes `path` through `write(fd)`, which writes the contents to the open file and returns
// false on failure (with errno set). Errors as AtomicFile's; `path` is untouched on error.
Result<bool> write_file_atomically(const std::string& path, const std::string& field,
                                   const std::function<bool(int fd)>& write);

// The same for contents already in memory.
Result<bool> write_text_atomically(const std::string& path, const std::string& field, std::string_view text);

// A path the command writes (`path`, given as option `field`) beside the paths it reads and
// its other outputs (`others`: each a path and its option): BadInput naming `field` where it
// names the same file as one of them, which the write would replace (an SVG over the plan file
// it draws) or which one of the two writes would lose. An input counts only where it exists;
// the standard streams (/dev/stdout, /dev/stderr) may be named by several outputs.
struct NamedPath {
  std::string path;
  std::string field;
  bool output = false;  // another output: counts whether or not it exists yet
};
Result<bool> check_distinct_output(const std::string& path, const std::string& field,
                                   const std::vector<NamedPath>& others);

// The hidden name of a temporary beside `name` (a file or folder name, no slash): "." + name +
// `suffix` (".tmp-XXXXXX", mkstemp's template), with `name` cut short where the whole would pass
// the 255 bytes a file name may hold, so that any name the file system takes can be written.
std::string hidden_temporary_name(const std::string& name, std::string_view suffix);

// Whether `path` names standard output (/dev/stdout, /dev/fd/1, /proc/self/fd/1), which a
// command's -o then shares with its answer.
bool names_standard_output(const std::string& path);

// write(2) until all n bytes are written; false on an error other than EINTR.
bool write_all(int fd, const void* data, std::size_t n);

// fsync of a folder, so that a rename in it survives a crash.
bool sync_dir(const std::string& dir);

}  // namespace longctx
