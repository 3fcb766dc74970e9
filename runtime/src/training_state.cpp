#include "longctx/runtime/training_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/input_file.h"
#include "planner/core/fingerprint.h"
#include "planner/core/units.h"
#include "longctx/runtime/adamw.h"
#include "longctx/runtime/memory_meter.h"
#include "exception_text.h"

// POSIX file calls rather than std::filesystem: libtorch.so exports its own copy of part of
// it, built for another ABI.
namespace longctx::runtime {

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kLock = ".lock";
constexpr const char* kSections[3] = {"model", "parallel", "train"};
constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

std::string errno_text() { return std::strerror(errno); }

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

// A regular file's size; -1 when it is missing, -2 when it is not a regular file (a folder,
// a FIFO: reading those would fail or block).
std::int64_t regular_file_size(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return S_ISREG(st.st_mode) ? static_cast<std::int64_t>(st.st_size) : -2;
}

// The CRC-32 (zlib's) of a regular file's contents; nullopt when it cannot be read.
std::optional<std::uint32_t> file_crc32(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> buf(std::size_t{1} << 20);
  for (;;) {
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (got == 0) break;
    crc = ::crc32(crc, buf.data(), static_cast<uInt>(got));
  }
  ::close(fd);
  return static_cast<std::uint32_t>(crc);
}

std::string host_name() {
  char host[256] = {};
  return ::gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
}

// "pid <P>\nhost <H>\n" -> "pid <P> on host <H>".
std::string owner_text(const std::string& lock_text) {
  long pid = 0;
  char host[256] = {};
  if (std::sscanf(lock_text.c_str(), "pid %ld host %255s", &pid, host) == 2) return fmt::format("pid {} on host {}", pid, host);
  return "an owner that has not written its name yet";
}

// The advisory lock on a checkpoint folder (flock on D/.lock), held while this lives. The
// file holds its owner while held and is emptied on release: a non-empty file found
// unlocked was left by a run that died holding it.
class FolderLock {
 public:
  static Result<std::shared_ptr<FolderLock>> take(const std::string& dir, std::FILE* log) {
    const std::string path = dir + "/" + kLock;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0)
      return Error::bad_input("--checkpoint-dir", fmt::format("cannot open the lock {}: {}; remove it if it is not a "
                                                              "regular file",
                                                              path, errno_text()));
    auto lock = std::shared_ptr<FolderLock>(new FolderLock(fd));
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      return Error::bad_input("--checkpoint-dir", fmt::format("{} is not a regular file; remove it", path));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK)
        return Error::bad_input("--checkpoint-dir", fmt::format("cannot lock {}: {}", path, errno_text()));
      return Error::bad_input("--checkpoint-dir",
                              fmt::format("{} is in use by another run ({}, lock {}); wait for it to end, or choose "
                                          "another folder",
                                          dir, owner_text(lock->contents()), path));
    }
    if (const std::string stale = lock->contents(); !stale.empty() && log)
      std::fprintf(log, "checkpoint: %s held a stale lock of %s, which no longer runs; taken over\n", dir.c_str(),
                   owner_text(stale).c_str());
    const std::string me = fmt::format("pid {}\nhost {}\n", ::getpid(), host_name());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()) ||
        ::fsync(fd) != 0)
      return Error{ErrorKind::Internal, "--checkpoint-dir", fmt::format("cannot write the lock {}: {}", path, errno_text())};
    lock->held_ = true;
    return lock;
  }
  ~FolderLock() {
    if (held_ && ::ftruncate(fd_, 0) != 0) {}  // emptied: released cleanly, not stale
    ::close(fd_);  // drops the flock
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  std::string contents() const {
    char buf[512];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  }
  int fd_;
  bool held_ = false;
};

// Reads a manifest's fields, range-checked; the first field out of range is kept in
// `problem` (and later reads return their lower bound).
struct ManifestFields {
  const nlohmann::json& m;
  std::string problem;

  const nlohmann::json* find(const std::string& dotted) {
    if (!problem.empty()) return nullptr;
    std::string ptr = "/" + dotted;
    std::replace(ptr.begin(), ptr.end(), '.', '/');
    const nlohmann::json::json_pointer p(ptr);
    if (!m.contains(p)) {
      problem = dotted + " is missing";
      return nullptr;
    }
    return &m.at(p);
  }
  std::int64_t integer(const std::string& dotted, std::int64_t lo, std::int64_t hi) {
    const auto* v = find(dotted);
    if (!v) return lo;
    const bool in_range = v->is_number_unsigned() ? v->get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                          : v->is_number_integer() ? v->get<std::int64_t>() >= lo && v->get<std::int64_t>() <= hi
                                                   : false;
    if (in_range && v->get<std::int64_t>() >= lo) return v->get<std::int64_t>();
    problem = fmt::format("{} is {}, not a whole number from {} to {}", dotted, v->dump(), lo, hi);
    return lo;
  }
  std::uint64_t unsigned_integer(const std::string& dotted) {
    const auto* v = find(dotted);
    if (v && v->is_number_unsigned()) return v->get<std::uint64_t>();
    if (v) problem = fmt::format("{} is {}, not a whole number from 0 to 2^64-1", dotted, v->dump());
    return 0;
  }
  std::string text(const std::string& dotted) {
    const auto* v = find(dotted);
    if (v && v->is_string()) return v->get<std::string>();
    if (v) problem = fmt::format("{} is {}, not a string", dotted, v->dump());
    return "";
  }
};

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

// A step folder holds only files; deletes them and the folder, the manifest first, so a
// deletion cut short leaves an incomplete checkpoint, never a complete-looking one.
void remove_step_dir(const std::string& dir) {
  ::unlink((dir + "/" + kManifest).c_str());
  for (const auto& name : list_dir(dir)) ::unlink((dir + "/" + name).c_str());
  ::rmdir(dir.c_str());
}

// "step-<N>" -> N; -1 for any other name.
int step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 14) return -1;
  int n = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

// The step folders of dir, oldest first, and whether each is complete (has its manifest).
std::vector<std::pair<int, bool>> step_dirs(const std::string& dir) {
  std::vector<std::pair<int, bool>> steps;
  for (const auto& name : list_dir(dir))
    if (const int n = step_of(name); n >= 0) steps.emplace_back(n, exists(dir + "/" + name + "/" + kManifest));
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string data_text(std::int64_t tokens) {
  return tokens == 0 ? "synthetic tokens" : fmt::format("a --data file of {} tokens", tokens);
}

}  // namespace

Result<bool> check_checkpoint_options(const CheckpointOptions& o) {
  if (o.every && *o.every < 1)
    return Error::bad_input("--checkpoint-every", fmt::format("{} is not a step count; save every N >= 1 steps", *o.every));
  if (o.keep < 1) return Error::bad_input("--keep", fmt::format("{} keeps no checkpoint; keep at least 1", o.keep));
  if (o.dir.empty() && o.resume)
    return Error::bad_input("--resume", "needs --checkpoint-dir DIR, the folder the interrupted run saved into");
  if (o.dir.empty() && o.every)
    return Error::bad_input("--checkpoint-every", "needs --checkpoint-dir DIR, the folder to save into");
  if (o.keep_given && !o.every)
    return Error::bad_input("--keep", "counts the checkpoints --checkpoint-every N saves, and none is saved; add "
                                      "--checkpoint-every N and --checkpoint-dir DIR, or drop --keep");
  if (!o.dir.empty() && !o.every && !o.resume)
    return Error::bad_input("--checkpoint-dir",
                            "given without --checkpoint-every N or --resume; add one, or drop --checkpoint-dir");
  return true;
}

std::string plan_fingerprint(const Plan& plan, const std::string& section) {
  return fnv1a_64_hex(plan_to_json(plan).at(section).dump());
}

std::string TrainingCheckpoints::step_dir(int step) const { return fmt::format("{}/step-{}", o_.dir, step); }

std::string TrainingCheckpoints::rank_file_name() const {
  return fmt::format("rank-{}-of-{}.pt", rank_.rank, rank_.world);
}

Result<TrainingCheckpoints> TrainingCheckpoints::open(const CheckpointOptions& o, const Plan& plan, std::uint64_t seed,
                                                      std::int64_t data_tokens, int total_steps, CheckpointRank rank) {
  if (auto r = check_checkpoint_options(o); !r) return r.error();
  TrainingCheckpoints c;
  c.o_ = o;
  c.rank_ = std::move(rank);
  c.seed_ = seed;
  c.data_tokens_ = data_tokens;
  if (o.dir.empty()) return c;
  for (int s = 0; s < 3; ++s) c.fingerprint_[s] = plan_fingerprint(plan, kSections[s]);

  // mkdir -p, then a probe file: a folder that exists but refuses writes fails here, not at
  // the first save.
  for (std::size_t pos = 1; pos <= o.dir.size(); ++pos)
    if (pos == o.dir.size() || o.dir[pos] == '/') ::mkdir(o.dir.substr(0, pos).c_str(), 0755);
  const std::string probe = fmt::format("{}/.write-test-{}", o.dir, ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Error::bad_input("--checkpoint-dir",
                            fmt::format("cannot write into {}: {}; choose a folder this user can write", o.dir, errno_text()));
  ::close(fd);
  ::unlink(probe.c_str());
  // Before anything is read: another run's saves must not change the folder under us.
  if (c.rank_.rank == 0) {
    LONGCTX_TRY(c.lock_, FolderLock::take(o.dir, o.log));
  }

  std::optional<int> newest;
  for (const auto& [step, complete] : step_dirs(o.dir))
    if (complete) newest = step;
  if (newest && !o.resume)
    return Error::bad_input("--checkpoint-dir",
                            fmt::format("{} already holds checkpoints (the newest after step {}); add --resume to go on "
                                        "from it, or choose an empty folder",
                                        o.dir, *newest));
  if (newest)
    if (auto r = c.check_newest(*newest, total_steps); !r) return r.error();
  // Step folders without a manifest are saves that were cut short: never used, deleted.
  if (c.rank_.rank == 0)
    for (const auto& [step, complete] : step_dirs(o.dir))
      if (!complete) remove_step_dir(c.step_dir(step));
  return c;
}

Result<bool> TrainingCheckpoints::check_newest(int newest, int total_steps) {
  const std::string manifest_path = step_dir(newest) + "/" + kManifest;
  const auto damaged = [&](const std::string& why) {
    return Error::bad_input("--resume", fmt::format("{} is damaged ({}); delete {} to resume from the checkpoint before it",
                                                    manifest_path, why, step_dir(newest)));
  };
  auto text = read_regular_file(manifest_path, "--resume");
  if (!text) return damaged(text.error().message);
  const auto m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return damaged("not JSON");
  ManifestFields f{m, ""};
  if (const auto format = f.text("format"); f.problem.empty() && format != kTrainingStateFormat)
    return Error::bad_input("--resume", fmt::format("{} has format {}; this build reads {}; resume with the build that "
                                                    "wrote it, or start a new --checkpoint-dir",
                                                    manifest_path, m.at("format").dump(), kTrainingStateFormat));
  const auto world = f.integer("world_size", 1, 1 << 20);
  if (f.problem.empty() && world != rank_.world)
    return Error::bad_input("--nproc", fmt::format("the checkpoint after step {} in {} was saved by {} ranks, this run has "
                                                   "{}; resume with {} ranks (its shards are per rank)",
                                                   newest, o_.dir, world, rank_.world, world));
  for (int s = 0; s < 3; ++s) {
    const auto saved = f.text(fmt::format("plan.{}", kSections[s]));
    if (f.problem.empty() && saved != fingerprint_[s])
      return Error::bad_input("--plan", fmt::format("the plan's {} section differs from the one the checkpoint after step {} "
                                                    "in {} was saved with (fingerprint {} there, {} here); resume with "
                                                    "the plan that run used, or start a new --checkpoint-dir",
                                                    kSections[s], newest, o_.dir, saved, fingerprint_[s]));
  }
  const auto saved_seed = f.unsigned_integer("seed");
  if (f.problem.empty() && saved_seed != seed_)
    return Error::bad_input("--seed", fmt::format("the checkpoint in {} was saved by a run with seed {}; pass --seed {}",
                                                  o_.dir, saved_seed, saved_seed));
  const auto saved_tokens = f.integer("data.tokens", 0, kMaxInt64);
  if (f.problem.empty() && saved_tokens != data_tokens_)
    return Error::bad_input("--data", fmt::format("the checkpoint in {} was saved by a run on {}, this run reads {}; "
                                                  "pass the same --data",
                                                  o_.dir, data_text(saved_tokens), data_text(data_tokens_)));
  start_step_ = static_cast<int>(f.integer("step", 1, std::numeric_limits<int>::max()));
  // The read position in the --data file; synthetic tokens have none (always 0).
  cursor_ = f.integer("data.cursor", 0, std::max<std::int64_t>(data_tokens_ - 1, 0));
  const std::string mine = fmt::format("ranks.{}", rank_.rank);
  if (const auto* ranks = f.find("ranks"); ranks && (!ranks->is_array() || ranks->size() != std::size_t(rank_.world)))
    f.problem = fmt::format("ranks is {}, not a list of {} rank files", ranks->dump(), rank_.world);
  if (const auto file = f.text(mine + ".file"); f.problem.empty() && file != rank_file_name())
    f.problem = fmt::format("{}.file is '{}', not '{}'", mine, file, rank_file_name());
  rank_file_bytes_ = f.integer(mine + ".bytes", 1, kMaxInt64);
  rank_file_crc_ = static_cast<std::uint32_t>(f.integer(mine + ".crc32", 0, 0xffffffffLL));
  if (!f.problem.empty()) return damaged(f.problem);
  if (start_step_ != newest) return damaged(fmt::format("its step is {}", start_step_));
  if (start_step_ >= total_steps)
    return Error::bad_input("--steps", fmt::format("{} steps are already done (the checkpoint in {}); --steps counts the "
                                                   "whole run: ask for more than {}",
                                                   start_step_, o_.dir, start_step_));
  return true;
}

Result<bool> TrainingCheckpoints::restore(const std::vector<at::Tensor>& params, AdamW& optimizer) {
  if (start_step_ == 0) return true;

  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = step_dir(start_step_) + "/" + rank_file_name();
  const auto damaged = [&](const std::string& why) {
    return Error::bad_input("--resume", fmt::format("{}: {}; delete {} to resume from the checkpoint before it", path, why,
                                                    step_dir(start_step_)));
  };
  if (const auto size = regular_file_size(path); size != rank_file_bytes_)
    return damaged(size == -1   ? "missing"
                   : size == -2 ? "not a regular file"
                                : fmt::format("{} bytes, the manifest says {}", size, rank_file_bytes_));
  // Before LibTorch reads it: a flipped byte, or a same-sized file of another step, would
  // otherwise load and train on.
  if (const auto crc = file_crc32(path); !crc)
    return damaged(fmt::format("cannot read it: {}", errno_text()));
  else if (*crc != rank_file_crc_)
    return damaged(fmt::format("its CRC-32 is {:08x}, the manifest says {:08x}: the file was changed or replaced", *crc,
                               rank_file_crc_));

  // Paused: the archive holds a whole copy of the state until every tensor is copied in.
  MeterPause pause;
  try {
    torch::NoGradGuard no_grad;
    torch::serialize::InputArchive archive;
    archive.load_from(path, torch::Device(torch::kCPU));
    const auto read_int = [&](const std::string& key) {
      c10::IValue v;
      archive.read(key, v);
      return v.toInt();
    };
    // Into `target` in place; the archive's tensor must have its shape and dtype.
    const auto read_into = [&](const std::string& key, const at::Tensor& target) -> std::string {
      at::Tensor saved;
      if (!archive.try_read(key, saved, /*is_buffer=*/true)) return fmt::format("{} is missing", key);
      if (saved.sizes() != target.sizes() || saved.scalar_type() != target.scalar_type())
        return fmt::format("{} is {} {}, this run's is {} {}", key, c10::toString(saved.scalar_type()),
                           c10::str(saved.sizes()), c10::toString(target.scalar_type()), c10::str(target.sizes()));
      target.copy_(saved);
      return "";
    };
    const auto& states = optimizer.state();
    if (read_int("params") != static_cast<std::int64_t>(params.size()) || states.size() != params.size())
      return damaged(fmt::format("it holds {} parameters, this run has {}", read_int("params"), params.size()));
    for (std::size_t i = 0; i < params.size(); ++i) {
      std::vector<std::pair<std::string, at::Tensor>> tensors = {
          {fmt::format("param_{}", i), params[i].detach()},
          {fmt::format("adamw_{}_exp_avg", i), states[i].exp_avg},
          {fmt::format("adamw_{}_exp_avg_sq", i), states[i].exp_avg_sq}};
      if (states[i].master.defined()) tensors.emplace_back(fmt::format("adamw_{}_master", i), states[i].master);
      for (const auto& [key, target] : tensors)
        if (auto why = read_into(key, target); !why.empty()) return damaged(why);
    }
    optimizer.set_steps(read_int("adamw_t"));
    at::Tensor rng;
    archive.read("cpu_rng", rng, /*is_buffer=*/true);
    at::Generator cpu_rng = at::detail::getDefaultCPUGenerator();  // a handle to the process's generator
    cpu_rng.set_state(rng);
  } catch (const std::exception& e) {
    return damaged(fmt::format("cannot read it: {}", exception_text(e)));
  }
  if (o_.log)
    std::fprintf(o_.log, "checkpoint: resumed after step %d from %s (%.2f s)\n", start_step_, step_dir(start_step_).c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return true;
}

namespace {

// Serializes this rank's state into `path` through the atomic writer.
// LibTorch's archive writer (caffe2::serialize::PyTorchStreamWriter) checks every write its
// sink reports and throws ("unexpected pos") on a short one; it then throws again from its
// destructor while the first exception unwinds, which ends the process. So the sink always
// takes the bytes, the first write error is kept by the AtomicFile, and commit() reports it
// once the archive is done.
Result<bool> write_state_archive(const std::string& path, const std::vector<at::Tensor>& params,
                                 const AdamW& optimizer) {
  // Paused: serializing from CPU tensors writes their storage as it stands; a GPU tensor is
  // staged through one host copy at a time. The archive holds references, not copies, until
  // save_to; save_to's serializer (torch/csrc/jit/serialization/export_module.cpp,
  // ScriptModuleSerializer::writeArchive) then copies each tensor to the host inside its
  // loop over the pickled tensors (getWriteableTensorData, which calls .to(kCPU) for a
  // non-CPU storage) and drops the copy once its record is written. So a save's host
  // staging is at most the largest single state tensor, not the rank's state; uncounted
  // like the rest of the save, which is I/O between steps.
  MeterPause pause;
  LONGCTX_TRY(AtomicFile file, AtomicFile::open(path, "--checkpoint-dir"));
  try {
    torch::NoGradGuard no_grad;
    torch::serialize::OutputArchive archive;
    const auto& states = optimizer.state();
    archive.write("params", c10::IValue(static_cast<std::int64_t>(params.size())));
    archive.write("adamw_t", c10::IValue(optimizer.steps()));
    for (std::size_t i = 0; i < params.size(); ++i) {
      archive.write(fmt::format("param_{}", i), params[i].detach(), /*is_buffer=*/true);
      if (states[i].master.defined()) archive.write(fmt::format("adamw_{}_master", i), states[i].master, true);
      archive.write(fmt::format("adamw_{}_exp_avg", i), states[i].exp_avg, true);
      archive.write(fmt::format("adamw_{}_exp_avg_sq", i), states[i].exp_avg_sq, true);
    }
    archive.write("cpu_rng", at::detail::getDefaultCPUGenerator().get_state(), true);
    archive.save_to([&](const void* data, std::size_t n) -> std::size_t {
      file.write(data, n);  // a failure is kept for commit()
      return n;
    });
  } catch (const std::exception& e) {
    return Error{ErrorKind::Internal, "--checkpoint-dir", fmt::format("cannot write {}: {}", path, exception_text(e))};
  }
  return file.commit();
}

}  // namespace

Result<bool> TrainingCheckpoints::save(int steps_done, std::int64_t data_cursor, const std::vector<at::Tensor>& params,
                                       const AdamW& optimizer) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = step_dir(steps_done);
  // Every rank learns whether every other rank did its part before going on, so a failed
  // save, on any rank, leaves no step folder behind and every rank reports it.
  const auto failures = [&](bool failed) { return rank_.count_failures ? rank_.count_failures(failed) : int{failed}; };
  const auto failed = [&](const Error& e) -> Result<bool> {
    if (rank_.rank == 0) remove_step_dir(dir);
    return e;
  };
  std::optional<Error> own;
  if (rank_.rank == 0 && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    own = Error{ErrorKind::Internal, "--checkpoint-dir", fmt::format("cannot create {}: {}", dir, errno_text())};
  if (failures(own.has_value()) > 0)  // the folder exists for every rank, or for none
    return own ? *own : Error{ErrorKind::Internal, "--checkpoint-dir", fmt::format("rank 0 could not create {}", dir)};
  if (auto r = write_state_archive(dir + "/" + rank_file_name(), params, optimizer); !r) own = r.error();
  if (const int n = failures(own.has_value()); n > 0)  // every rank file is in place, or the folder goes
    return failed(own ? *own
                      : Error{ErrorKind::Internal, "--checkpoint-dir",
                              fmt::format("{} of {} ranks could not write their checkpoint file in {}; it was removed", n,
                                          rank_.world, dir)});

  std::int64_t bytes = 0;
  if (rank_.rank == 0) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < rank_.world; ++r) {
      const std::string name = fmt::format("rank-{}-of-{}.pt", r, rank_.world);
      const auto size = regular_file_size(dir + "/" + name);
      const auto crc = file_crc32(dir + "/" + name);
      if (size < 0 || !crc)
        return failed(Error{ErrorKind::Internal, "--checkpoint-dir",
                            fmt::format("cannot read back {}/{}: {}", dir, name, errno_text())});
      ranks.push_back({{"file", name}, {"bytes", size}, {"crc32", *crc}});
      bytes += size;
    }
    nlohmann::json plan;
    for (int s = 0; s < 3; ++s) plan[kSections[s]] = fingerprint_[s];
    const nlohmann::json m = {{"format", kTrainingStateFormat},
                              {"step", steps_done},
                              {"world_size", rank_.world},
                              {"plan", plan},
                              {"seed", seed_},
                              {"data", {{"tokens", data_tokens_}, {"cursor", data_cursor}}},
                              {"ranks", ranks}};
    if (auto r = write_text_atomically(dir + "/" + kManifest, "--checkpoint-dir", m.dump(2) + "\n"); !r)
      return failed(r.error());
    sync_dir(o_.dir);  // the step folder's own entry

    std::vector<int> complete;
    for (const auto& [step, done] : step_dirs(o_.dir))
      if (done) complete.push_back(step);
    for (std::size_t i = 0; i + static_cast<std::size_t>(o_.keep) < complete.size(); ++i)
      remove_step_dir(step_dir(complete[i]));
  }
  if (o_.log && rank_.rank == 0)
    std::fprintf(o_.log, "checkpoint: saved after step %d to %s (%s, %.2f s)\n", steps_done, dir.c_str(),
                 format_bytes(bytes).c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return true;
}

}  // namespace longctx::runtime
