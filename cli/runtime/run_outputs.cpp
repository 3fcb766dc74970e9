// The run's output files, opened up front and put in place whole (run_outputs.h).
#include "cli/runtime/run_outputs.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace longctx::cli {

std::string rank_path(const std::string& path, int rank) {
  if (path.empty() || rank == 0) return path;
  const std::string r = std::to_string(rank);
  const auto dot = path.rfind('.');
  const bool ext = dot != std::string::npos && path.find('/', dot) == std::string::npos;
  return ext ? path.substr(0, dot) + ".rank" + r + path.substr(dot) : path + ".rank" + r;
}

Result<bool> check_run_files(const RunFiles& f, int world) {
  const std::pair<const std::string*, const char*> outputs[] = {
      {&f.trace, "--trace"}, {&f.op_times, "--op-times"}, {&f.allocation_log, "--allocation-log"}};
  std::vector<NamedPath> written;  // every rank's outputs so far
  for (int r = 0; r < world; ++r)
    for (const auto& [path, flag] : outputs) {
      if (path->empty()) continue;
      if (f.json_report && names_standard_output(*path))
        return Error::bad_input(flag, fmt::format("'{}' is standard output, where --json prints the run's report: two "
                                                  "documents there read as no JSON; name a file, or leave out --json",
                                                  *path));
      const std::string mine = rank_path(*path, r);
      if (world > 1 && (path->starts_with("/dev/") || path->starts_with("/proc/")))
        return Error::bad_input(flag, fmt::format("'{}' cannot hold one file per rank ({} ranks: rank 1 would write "
                                                  "'{}'); name a file",
                                                  *path, world, rank_path(*path, 1)));
      std::vector<NamedPath> others = written;
      others.push_back({f.plan, "--plan"});
      if (!f.data.empty()) others.push_back({f.data, "--data"});
      LONGCTX_TRY(auto apart, check_distinct_output(mine, r == 0 ? flag : fmt::format("{} (rank {}: {})", flag, r, mine),
                                                    others));
      (void)apart;
      written.push_back({mine, flag, /*output=*/true});
    }
  return true;
}

namespace {

// An output file a flag names; none where the path is empty.
Result<std::optional<AtomicFile>> open_output(const std::string& path, const std::string& flag) {
  if (path.empty()) return std::optional<AtomicFile>();
  auto f = AtomicFile::open(path, flag);
  if (!f) return f.error();
  return std::optional<AtomicFile>(std::move(*f));
}

// `text` as the whole of `file`, put in place under its name (a failed write: commit's error).
Result<bool> write_whole(AtomicFile& file, const std::string& text) {
  file.write(text.data(), text.size());
  return file.commit();
}

}  // namespace

Result<RunOutputs> RunOutputs::open(const std::string& trace, const std::string& op_times,
                                    const std::string& allocation_log, int rank) {
  RunOutputs out;
  out.trace_path_ = rank_path(trace, rank);
  LONGCTX_TRY(out.trace_, open_output(out.trace_path_, "--trace"));
  LONGCTX_TRY(out.op_times_, open_output(rank_path(op_times, rank), "--op-times"));
  LONGCTX_TRY(out.log_file_, open_output(rank_path(allocation_log, rank), "--allocation-log"));
  if (out.log_file_) {
    out.log_.reset(::fdopen(::dup(out.log_file_->fd()), "w"));
    if (!out.log_) return Error{ErrorKind::Internal, "--allocation-log", std::strerror(errno)};
  }
  return out;
}

Result<bool> RunOutputs::finish_log() {
  if (!log_file_) return true;
  if (std::fflush(log_.get()) != 0 || std::ferror(log_.get())) log_file_->fail(errno != 0 ? errno : EIO);
  log_.reset();
  return log_file_->commit();
}

Result<bool> RunOutputs::write_trace(const std::string& text) { return write_whole(*trace_, text); }
Result<bool> RunOutputs::write_op_times(const std::string& text) { return write_whole(*op_times_, text); }

}  // namespace longctx::cli
