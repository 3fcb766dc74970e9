#include "common/atomic_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/atomic_file.h"
#include "common/input_file.h"

namespace longctx {
namespace {

constexpr const char* kNothing = "nothing was written; the folder is as it was";

std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string name_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// A staging folder and what was put in it; removed with its contents unless released.
class Staging {
 public:
  explicit Staging(std::string path) : path_(std::move(path)) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    if (path_.empty()) return;
    for (const std::string& name : names_) ::unlink(at(name).c_str());
    ::rmdir(path_.c_str());
  }
  std::string at(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  void holds(const std::string& name) { names_.push_back(name); }
  void release() { path_.clear(); }

 private:
  std::string path_;
  std::vector<std::string> names_;
};

Error write_failed(const std::string& field, const std::string& path, int err) {
  return Error{ErrorKind::Internal, field, fmt::format("cannot write '{}': {}; {}", path, std::strerror(err), kNothing)};
}

// Writes and flushes one file of the set.
Result<bool> stage_file(Staging& s, const std::string& name, const std::string& text, const std::string& field) {
  const std::string path = s.at(name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return write_failed(field, path, errno);
  s.holds(name);
  const bool ok = write_all(fd, text.data(), text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !ok) return write_failed(field, path, ok ? errno : err);
  return true;
}

Result<bool> stage_all(Staging& s, const std::map<std::string, std::string>& files, const std::string& field) {
  for (const auto& [name, text] : files) {
    LONGCTX_TRY(auto ok, stage_file(s, name, text, field));
    (void)ok;
  }
  return true;
}

// A folder that does not exist yet: staged beside it and renamed into place whole.
Result<FolderWrite> write_new_folder(const std::string& folder, const std::string& field,
                                     const std::map<std::string, std::string>& files) {
  std::string tmpl = parent_of(folder) + "/" + hidden_temporary_name(name_of(folder), ".staging-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr)
    return Error::bad_input(field, fmt::format("cannot make the folder '{}': {}; give a folder whose parent exists and "
                                               "is writable",
                                               folder, std::strerror(errno)));
  Staging s(tmpl);
  LONGCTX_TRY(auto staged, stage_all(s, files, field));
  (void)staged;
  // mkdtemp made it 0700; the folder gets the mode mkdir would give it (0777 less the umask),
  // so the configs and the launch script are as readable as any folder the user makes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::chmod(s.path().c_str(), 0777 & ~mask) != 0) return write_failed(field, folder, errno);
  if (::rename(s.path().c_str(), folder.c_str()) != 0) return write_failed(field, folder, errno);
  s.release();
  sync_dir(parent_of(folder));
  FolderWrite out;
  for (const auto& [name, text] : files) out.added.push_back(name);
  return out;
}

// Puts the old files back after a failed rename: `done` names were renamed over.
void roll_back(const Staging& s, const std::string& folder, const std::vector<std::string>& done,
               const std::vector<std::string>& replaced) {
  for (const std::string& name : done) {
    const bool had_old = std::find(replaced.begin(), replaced.end(), name) != replaced.end();
    const std::string target = folder + "/" + name;
    if (had_old) ::rename(s.at(".old-" + name).c_str(), target.c_str());
    else ::unlink(target.c_str());
  }
}

// An existing folder: staged inside it; old files kept by hard links until every rename is done.
Result<FolderWrite> write_into_folder(const std::string& folder, const std::string& field,
                                      const std::map<std::string, std::string>& files) {
  FolderWrite out;
  for (const auto& [name, text] : files) {
    struct stat st{};
    const std::string target = folder + "/" + name;
    if (::lstat(target.c_str(), &st) != 0) {
      out.added.push_back(name);
      continue;
    }
    if (!S_ISREG(st.st_mode))
      return Error::bad_input(field, fmt::format("'{}' is {}; longctx replaces regular files only: move it away; {}",
                                                 target, file_kind(st.st_mode), kNothing));
    out.replaced.push_back(name);
  }
  std::string tmpl = folder + "/.longctx-staging-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return write_failed(field, folder, errno);
  Staging s(tmpl);
  LONGCTX_TRY(auto staged, stage_all(s, files, field));
  (void)staged;
  for (const std::string& name : out.replaced) {
    if (::link((folder + "/" + name).c_str(), s.at(".old-" + name).c_str()) != 0) return write_failed(field, folder, errno);
    s.holds(".old-" + name);
  }
  std::vector<std::string> done;
  for (const auto& [name, text] : files) {
    if (::rename(s.at(name).c_str(), (folder + "/" + name).c_str()) != 0) {
      const int err = errno;
      roll_back(s, folder, done, out.replaced);
      return write_failed(field, folder + "/" + name, err);
    }
    done.push_back(name);
  }
  sync_dir(folder);
  return out;
}

}  // namespace

Result<FolderWrite> write_files_atomically(const std::string& folder, const std::string& field,
                                           const std::map<std::string, std::string>& files) {
  if (folder.empty()) return Error::bad_input(field, "is an empty path; name a folder");
  struct stat st{};
  if (::stat(folder.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return Error::bad_input(field, fmt::format("cannot use the folder '{}': {}", folder, std::strerror(errno)));
    return write_new_folder(folder, field, files);
  }
  if (!S_ISDIR(st.st_mode))
    return Error::bad_input(field, fmt::format("'{}' is {}, not a folder; name a folder for this stack's {} files",
                                               folder, file_kind(st.st_mode), files.size()));
  return write_into_folder(folder, field, files);
}

}  // namespace longctx
