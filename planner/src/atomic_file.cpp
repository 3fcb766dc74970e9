#include "longctx/planner/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace longctx {
namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
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

Result<bool> write_file_atomically(const std::string& path, const std::string& field,
                                   const std::function<bool(int fd)>& write) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Error::bad_input(field, fmt::format("cannot write '{}': {}; check the folder exists and is writable", path,
                                               std::strerror(errno)));
  const bool ok = write(fd) && ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return Error{ErrorKind::Internal, field, fmt::format("writing '{}' failed: {} (disk full?)", path, why)};
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string rename_why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Error{ErrorKind::Internal, field, fmt::format("cannot put '{}' in place: {}", path, rename_why)};
  }
  if (!sync_dir(folder_of(path)))
    return Error{ErrorKind::Internal, field, fmt::format("cannot flush the folder of '{}': {}", path, std::strerror(errno))};
  return true;
}

Result<bool> write_text_atomically(const std::string& path, const std::string& field, std::string_view text) {
  return write_file_atomically(path, field, [&](int fd) { return write_all(fd, text.data(), text.size()); });
}

}  // namespace longctx
