#include "common/atomic_file.h"

#include "common/interrupted_writes.h"
#include "common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace longctx {
namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The standard stream a path names, or -1: these are written in place.
int standard_stream(const std::string& path) {
  if (path == "/dev/stdout" || path == "/dev/fd/1" || path == "/proc/self/fd/1") return STDOUT_FILENO;
  if (path == "/dev/stderr" || path == "/dev/fd/2" || path == "/proc/self/fd/2") return STDERR_FILENO;
  return -1;
}

}  // namespace

bool names_standard_output(const std::string& path) { return standard_stream(path) == STDOUT_FILENO; }

namespace {

struct Target {
  std::string path;   // after following links
  mode_t mode = 0;    // an existing file's permissions; 0: a new file
};

// Follows symbolic links to the file a write would replace; refuses what is not a regular
// file (or nothing yet).
Result<Target> resolve(const std::string& path, const std::string& field) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) return Target{p, 0};
      return Error::bad_input(field, fmt::format("cannot write '{}': {}; name a file in a folder this user can write",
                                                 path, std::strerror(errno)));
    }
    if (S_ISREG(st.st_mode)) return Target{p, st.st_mode & 07777};
    if (!S_ISLNK(st.st_mode)) {
      const std::string via = p == path ? "" : fmt::format(" (through the link to '{}')", p);
      return Error::bad_input(field, fmt::format("'{}'{} is {}; longctx writes regular files only (or /dev/stdout): name "
                                                 "a file",
                                                 path, via, file_kind(st.st_mode)));
    }
    std::string link(4096, '\0');
    const ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n < 0) return Error::bad_input(field, fmt::format("cannot follow the link '{}': {}", p, std::strerror(errno)));
    link.resize(static_cast<std::size_t>(n));
    p = link[0] == '/' ? link : folder_of(p) + "/" + link;
  }
  return Error::bad_input(field, fmt::format("'{}' is a loop of symbolic links; name a file", path));
}

mode_t new_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = EIO;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

std::string hidden_temporary_name(const std::string& name, std::string_view suffix) {
  constexpr std::size_t kNameMax = 255;  // NAME_MAX of Linux's file systems
  const std::size_t room = kNameMax - 1 - std::min(suffix.size(), kNameMax - 1);
  return "." + name.substr(0, room) + std::string(suffix);
}

Result<AtomicFile> AtomicFile::open(const std::string& path, const std::string& field) {
  AtomicFile f;
  f.path_ = path;
  f.field_ = field;
  if (path.empty()) return Error::bad_input(field, "is an empty path; name a file");
  if (const int stream = standard_stream(path); stream >= 0) {
    f.fd_ = ::fcntl(stream, F_DUPFD_CLOEXEC, 3);
    if (f.fd_ < 0) return Error::bad_input(field, fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
    return f;
  }
  LONGCTX_TRY(const Target t, resolve(path, field));
  f.target_ = t.path;
  // A unique, hidden temporary: two writers of one name never share it, and no listing of
  // the folder mistakes it for the file.
  std::string tmpl = folder_of(t.path) + "/" + hidden_temporary_name(base_of(t.path), ".tmp-XXXXXX");
  f.fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (f.fd_ < 0)
    return Error::bad_input(field, fmt::format("cannot write '{}': {}; check the folder exists and is writable", path,
                                               std::strerror(errno)));
  f.tmp_ = tmpl;
  note_temporary(f.tmp_);  // removed if a signal ends the process (interrupted_writes.h)
  ::fchmod(f.fd_, t.mode != 0 ? t.mode : new_file_mode());
  return f;
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      target_(std::move(o.target_)),
      tmp_(std::exchange(o.tmp_, {})),
      field_(std::move(o.field_)),
      failed_errno_(o.failed_errno_) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& o) noexcept {
  if (this != &o) {
    discard();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    target_ = std::move(o.target_);
    tmp_ = std::exchange(o.tmp_, {});
    field_ = std::move(o.field_);
    failed_errno_ = o.failed_errno_;
  }
  return *this;
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) {
    ::unlink(tmp_.c_str());
    forget_temporary(tmp_);
  }
  tmp_.clear();
}

bool AtomicFile::write(const void* data, std::size_t n) {
  if (failed_errno_) return false;
  if (write_all(fd_, data, n)) return true;
  fail(errno);
  return false;
}

Result<bool> AtomicFile::commit() {
  const auto failed = [&](const char* what, int err) {
    discard();
    return Error{ErrorKind::Internal, field_, fmt::format("{} '{}' failed: {}", what, path_, std::strerror(err))};
  };
  if (fd_ < 0) return Error{ErrorKind::Internal, field_, fmt::format("'{}' is not open", path_)};
  if (failed_errno_) return failed("writing", failed_errno_);
  if (tmp_.empty()) {  // a standard stream: nothing to rename; a pipe or terminal has no fsync
    if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) return failed("flushing", errno);
    if (::close(std::exchange(fd_, -1)) != 0) return failed("closing", errno);
    return true;
  }
  if (::fsync(fd_) != 0) return failed("flushing", errno);
  if (::close(std::exchange(fd_, -1)) != 0) return failed("closing", errno);
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) return failed("putting in place", errno);
  forget_temporary(tmp_);
  tmp_.clear();
  if (!sync_dir(folder_of(target_)))
    return Error{ErrorKind::Internal, field_, fmt::format("cannot flush the folder of '{}': {}", path_, std::strerror(errno))};
  return true;
}

namespace {

// Whether two paths name one file: the same file where both exist (links followed), else the
// same absolute path once resolved as far as it exists.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec))
    return std::filesystem::equivalent(a, b, ec) && !ec;
  const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a, ec), ec);
  const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b, ec), ec);
  return !ec && ca == cb;
}

}  // namespace

Result<bool> check_distinct_output(const std::string& path, const std::string& field,
                                   const std::vector<NamedPath>& others) {
  if (path.empty() || standard_stream(path) >= 0) return true;
  for (const NamedPath& other : others) {
    std::error_code ec;
    if (other.path.empty() || standard_stream(other.path) >= 0) continue;
    if (!other.output && !std::filesystem::exists(other.path, ec)) continue;  // not read from a file
    if (!same_file(path, other.path)) continue;
    return Error::bad_input(field, fmt::format("'{}' names the same file as {} ('{}'): writing it would replace that "
                                               "file; give {} another path",
                                               path, other.field, other.path, field));
  }
  return true;
}

Result<bool> write_file_atomically(const std::string& path, const std::string& field,
                                   const std::function<bool(int fd)>& write) {
  LONGCTX_TRY(AtomicFile f, AtomicFile::open(path, field));
  if (!write(f.fd())) f.fail(errno != 0 ? errno : EIO);
  return f.commit();
}

Result<bool> write_text_atomically(const std::string& path, const std::string& field, std::string_view text) {
  LONGCTX_TRY(AtomicFile f, AtomicFile::open(path, field));
  f.write(text.data(), text.size());
  return f.commit();
}

}  // namespace longctx
