#pragma once
// Training-state checkpoints: what a run needs to go on exactly where it stopped, so that
// the losses of an interrupted and resumed run equal those of an uninterrupted one.
// (Not to be confused with activation checkpointing, checkpoint_store.h.)
//
// A checkpoint directory D holds one folder per saved step (format longctx.training-state/1):
//
//   D/step-<N>/rank-<R>-of-<W>.pt  one per rank, a LibTorch archive (torch::serialize::
//                                  OutputArchive) with that rank's tensors:
//                                    param_<i>              LlamaWeights::all()[i]
//                                    adamw_<i>_master       only where the parameter has one
//                                    adamw_<i>_exp_avg, adamw_<i>_exp_avg_sq
//                                    adamw_t, params        AdamW's step count; how many params
//                                    cpu_rng                the default CPU generator's state
//   D/step-<N>/manifest.json       written last: format, step, world size, the seed, the data
//                                  position, a fingerprint of each of the plan's model,
//                                  parallel and train sections, and each rank file's size
//                                  and CRC-32 (zlib's).
//   D/.lock                        the run's advisory lock (flock): "pid <P>\nhost <H>\n"
//                                  while a run holds it, emptied when the run ends.
//
// Guarantees:
//   - Every file is written under a temporary name, fsynced, renamed, and its folder fsynced:
//     under its own name a file is whole or absent.
//   - A step folder is a checkpoint once its manifest exists, and only then. Resuming uses the
//     newest one, and deletes step folders without a manifest (a run killed while saving).
//   - Restoring copies into the tensors the run set up, so each keeps its place (device, host
//     pool, pinned); a checkpoint of another plan, world size, seed or data source is refused.
//   - Saving and restoring happen between steps with the memory meter paused (MeterPause): the
//     archive's staging memory (up to one copy of the rank's state while loading) is I/O the
//     planner's step does not contain, so it neither counts toward the measured peaks nor
//     meets the virtual device's budgets.
//   - After a save, only the newest `keep` checkpoints are left.
//   - Resuming verifies the rank file's size and CRC-32 against the manifest before reading
//     it, and range-checks every manifest field: a damaged, truncated or foreign file (say a
//     rank file of another step) is refused with BadInput naming it, never trained on.
//   - One run at a time per folder: rank 0 holds D/.lock (flock) from open() until the
//     TrainingCheckpoints is destroyed; a second run is refused naming the holder's pid and
//     host. The kernel drops a flock when its process dies, so a lock left non-empty by a
//     killed run is stale: it is taken over, with a line in the log.
//   - A save that fails (a full disk) is an Internal error naming the file and the cause;
//     its temporaries are removed and the last complete checkpoint stays the newest.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/core/plan.h"
#include "common/result.h"

namespace at {
class Tensor;
}

namespace longctx::runtime {

class AdamW;

inline constexpr const char* kTrainingStateFormat = "longctx.training-state/1";

struct CheckpointOptions {
  std::string dir;            // empty: no checkpoints
  std::optional<int> every;   // save after every `every`-th step; none: never (resume only)
  int keep = 2;               // checkpoints left after a save; older ones are deleted
  bool keep_given = false;    // whether --keep was given: it needs saves to count
  bool resume = false;        // go on from the newest checkpoint in dir (from scratch if none)
  std::FILE* log = nullptr;   // a line per checkpoint saved or resumed from
};

// The options' own errors (BadInput naming the flag and the fix): every < 1, keep < 1,
// --resume or --checkpoint-every without --checkpoint-dir, a dir with neither, --keep without
// --checkpoint-every.
Result<bool> check_checkpoint_options(const CheckpointOptions& o);

// This process's place among the ranks. count_failures: every rank passes whether its own
// part failed; returns, once every rank has called it, how many did (REQUIRES with world > 1:
// every rank calls save() for the same steps). Unset: this rank alone.
struct CheckpointRank {
  int rank = 0;
  int world = 1;
  std::function<int(bool failed)> count_failures;
};

// The fingerprint of one section of a plan ("model", "parallel", "train"): FNV-1a 64 of its
// JSON text, as 16 hex digits.
std::string plan_fingerprint(const Plan& plan, const std::string& section);

class TrainingCheckpoints {
 public:
  // Checks the options, creates dir if missing and checks it is writable; with resume, finds
  // the newest checkpoint and checks it was written by this plan (model, parallel and train
  // sections), world size, seed and data source (data_tokens: tokens of the --data file, 0
  // for synthetic tokens), and for fewer than total_steps steps. Without resume, refuses a
  // dir that already holds checkpoints. Then (rank 0) deletes step folders without a
  // manifest. Errors: BadInput, naming the flag and the fix (and the lock's owner when
  // another run holds the folder).
  static Result<TrainingCheckpoints> open(const CheckpointOptions& o, const Plan& plan, std::uint64_t seed,
                                          std::int64_t data_tokens, int total_steps, CheckpointRank rank = {});

  int start_step() const { return start_step_; }       // steps already done; 0 from scratch
  std::int64_t data_cursor() const { return cursor_; }  // the data position after them
  bool due(int steps_done) const { return o_.every && steps_done % *o_.every == 0; }

  // Resuming: copies the checkpoint's tensors into params (LlamaWeights::all()) and the
  // optimizer's state, and restores its step count and the default CPU generator. Nothing
  // to do when start_step() is 0.
  // REQUIRES: a MeterScope is active; between steps. Errors: BadInput (a damaged checkpoint
  // or one whose tensors do not fit these), naming the file.
  Result<bool> restore(const std::vector<at::Tensor>& params, AdamW& optimizer);

  // Saves the state after `steps_done` steps, with the data position after them, and then
  // deletes all but the newest `keep` checkpoints. REQUIRES: as restore. Errors: Internal
  // (I/O), naming the file.
  Result<bool> save(int steps_done, std::int64_t data_cursor, const std::vector<at::Tensor>& params,
                    const AdamW& optimizer);

 private:
  TrainingCheckpoints() = default;
  // Reads the newest checkpoint's manifest into start_step_, cursor_, rank_file_bytes_,
  // rank_file_crc_, each field range-checked.
  Result<bool> check_newest(int newest, int total_steps);
  std::string step_dir(int step) const;
  std::string rank_file_name() const;

  CheckpointOptions o_;
  CheckpointRank rank_;
  std::string fingerprint_[3];  // model, parallel, train
  std::uint64_t seed_ = 0;
  std::int64_t data_tokens_ = 0;
  int start_step_ = 0;
  std::int64_t cursor_ = 0;
  std::int64_t rank_file_bytes_ = 0;  // of the checkpoint to resume from
  std::uint32_t rank_file_crc_ = 0;
  std::shared_ptr<void> lock_;        // rank 0: the folder's lock, held while this lives
};

}  // namespace longctx::runtime
