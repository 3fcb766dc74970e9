// The run's output files, opened up front and put in place whole (run_outputs.h).
#include "cli/runtime/run_outputs.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace longctx::cli {

std::string rank_trace_path(const std::string& path) {
  const char* rank = std::getenv("RANK");
  if (path.empty() || !rank || !*rank || std::string(rank) == "0") return path;
  const auto dot = path.rfind('.');
  const bool ext = dot != std::string::npos && path.find('/', dot) == std::string::npos;
  return ext ? path.substr(0, dot) + ".rank" + rank + path.substr(dot) : path + ".rank" + rank;
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
                                    const std::string& allocation_log) {
  RunOutputs out;
  out.trace_path_ = rank_trace_path(trace);
  LONGCTX_TRY(out.trace_, open_output(out.trace_path_, "--trace"));
  LONGCTX_TRY(out.op_times_, open_output(rank_trace_path(op_times), "--op-times"));
  LONGCTX_TRY(out.log_file_, open_output(allocation_log, "--allocation-log"));
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
