#include "common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <zlib.h>

namespace longctx {
namespace {

std::string size_text(std::uint64_t bytes) {
  if (bytes >= (std::uint64_t(1) << 30)) return fmt::format("{:.1f} GiB", double(bytes) / double(1 << 30));
  if (bytes >= (std::uint64_t(1) << 20)) return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20));
  return fmt::format("{} bytes", bytes);
}

Error too_large(const std::string& field, const std::string& path, const char* what, std::uint64_t max_bytes) {
  return Error::bad_input(field, fmt::format("'{}' {} more than longctx's limit of {} for this input; give the file "
                                             "this option takes (a longctx file is far smaller)",
                                             path, what, size_text(max_bytes)));
}

// Closes the descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Result<std::string> read_all(int fd, std::uint64_t expected, std::uint64_t max_bytes, const std::string& path,
                             const std::string& field) {
  std::string text;
  try {
    text.reserve(static_cast<std::size_t>(expected));
    char buf[65536];
    for (;;) {
      const ssize_t got = ::read(fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return Error::bad_input(field, fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
      if (got == 0) break;
      // A file may grow while it is read (or be a /proc file whose size says 0).
      if (text.size() + std::uint64_t(got) > max_bytes) return too_large(field, path, "holds", max_bytes);
      text.append(buf, static_cast<std::size_t>(got));
    }
  } catch (const std::bad_alloc&) {
    return Error::bad_input(field, fmt::format("'{}' ({}) does not fit in this process's memory", path, size_text(expected)));
  }
  return text;
}

}  // namespace

const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return S_ISREG(mode) ? "a regular file" : "not a regular file";
}

Result<std::string> read_regular_file(const std::string& path, const std::string& field, std::uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one.
  const Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) {
    const int err = errno;
    if (err == ELOOP) return Error::bad_input(field, fmt::format("'{}' is a loop of symbolic links; name a file", path));
    return Error::bad_input(field, fmt::format("cannot read '{}': {}", path, std::strerror(err)));
  }
  struct stat st{};
  if (::fstat(f.fd, &st) != 0)
    return Error::bad_input(field, fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return Error::bad_input(field, fmt::format("'{}' is {}, not a regular file; name a file", path, file_kind(st.st_mode)));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) return too_large(field, path, fmt::format("is {}:", size_text(size)).c_str(), max_bytes);
  return read_all(f.fd, size, max_bytes, path, field);
}

namespace {

// The text of a gzip member, at most `max_bytes` of it, or BadInput naming the file when it
// is damaged or inflates past the limit.
Result<std::string> gunzip(const std::string& bytes, const std::string& path, const std::string& field,
                           std::uint64_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK)  // 15 + 32: a gzip or zlib header, read from the data
    return Error{ErrorKind::Internal, field, "zlib could not start"};
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  bool over = false;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    const std::size_t got = sizeof buf - z.avail_out;
    if (out.size() + got > max_bytes) {
      over = true;
      break;
    }
    out.append(buf, got);
  }
  inflateEnd(&z);
  if (over) return too_large(field, path, "inflates to", max_bytes);
  if (rc != Z_STREAM_END)
    return Error::bad_input(field, fmt::format("{} is a damaged or truncated gzip file ({}); pass the whole file", path,
                                               z.msg ? z.msg : "no end of stream"));
  return out;
}

}  // namespace

Result<std::string> read_text_file(const std::string& path, const std::string& field, std::uint64_t max_bytes) {
  LONGCTX_TRY(const std::string text, read_regular_file(path, field, max_bytes));
  const bool gzip = text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
                    static_cast<unsigned char>(text[1]) == 0x8b;
  if (!gzip) return text;
  return gunzip(text, path, field, max_bytes);
}

}  // namespace longctx
