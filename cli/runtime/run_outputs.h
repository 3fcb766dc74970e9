#pragma once
// The files `longctx run` writes: its trace, its operator times and its allocation log. Each
// is opened before the run, so that a path that cannot be written fails at once, not after
// it, and is put in place whole (common/atomic_file.h).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "common/atomic_file.h"
#include "common/result.h"

namespace longctx::cli {

// Rank 0 writes FILE; rank R of several writes FILE with ".rankR" before its extension.
std::string rank_path(const std::string& path, int rank);

// The files a run reads and writes, as its flags give them (empty: not given).
struct RunFiles {
  std::string plan, data;                    // read
  std::string trace, op_times, allocation_log;  // written, one per rank (rank_path)
  bool json_report = false;                  // --json: the report is standard output's document
};

// BadInput naming the output's flag where any rank's output (`world` ranks) names a file
// the run reads or another output (a trace over the plan it runs, a rank's trace over a plan
// named like it: q.rank1.json), or, with several ranks, a stream or device (/dev/stdout would
// make rank 1 write /dev/stdout.rank1), or standard output beside the --json report (two
// documents there, which no JSON reader takes). Every rank checks every rank's paths, so all
// refuse alike before any step.
Result<bool> check_run_files(const RunFiles& f, int world);

class RunOutputs {
 public:
  // Each path as given to its flag (--trace, --op-times, --allocation-log), empty when not
  // given; each rank `rank`'s (rank_path). Errors: AtomicFile's, naming the flag.
  static Result<RunOutputs> open(const std::string& trace, const std::string& op_times,
                                 const std::string& allocation_log, int rank);

  const std::string& trace_path() const { return trace_path_; }  // this rank's; empty without --trace
  bool writes_trace() const { return trace_.has_value(); }
  bool times_ops() const { return op_times_.has_value(); }
  std::FILE* allocation_log() const { return log_.get(); }  // nullptr without --allocation-log

  // The log put in place once the run ends, a failed one too: it is then the record of what
  // was allocated up to the failure. Call once, before the other files are written.
  Result<bool> finish_log();
  // `text` as the whole trace / operator-times file. REQUIRES: writes_trace() / times_ops().
  Result<bool> write_trace(const std::string& text);
  Result<bool> write_op_times(const std::string& text);

 private:
  RunOutputs() = default;

  std::string trace_path_;
  std::optional<AtomicFile> trace_, op_times_, log_file_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{nullptr, &std::fclose};  // on a dup of log_file_'s fd
};

}  // namespace longctx::cli
