#pragma once
// The batches a rank trains on: synthetic tokens from (seed, step), or consecutive windows of
// a uint32 token file. Private to runtime/src (runner.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/result.h"
#include "planner/core/plan.h"
#include "longctx/runtime/communicator.h"
#include "longctx/runtime/run_options.h"
#include "longctx/runtime/ulysses.h"

namespace longctx::runtime {

struct Batch {
  torch::Tensor tokens, targets;  // [b, S] int64
};

// The world's batch is dp x micro_batch samples; a rank takes its samples' rows and its
// S/(u*r) columns of them (ulysses.h, sequence_shard).
class BatchSource {
 public:
  BatchSource(const Plan& p, const RunOptions& o, const Communicator& c);
  // Reads the token file, if any: BadInput naming --data when it is missing, a folder, a
  // FIFO or a device (read_regular_file never blocks on one), too short, or holds an id
  // outside the vocabulary.
  Result<bool> load(const std::string& path);
  std::int64_t tokens() const { return static_cast<std::int64_t>(file_.size()); }  // 0: synthetic
  // The read position in the file; synthetic tokens have none (they come from the step).
  std::int64_t cursor() const { return cursor_; }
  void restore_cursor(std::int64_t c) { cursor_ = c; }
  // Step `step`'s batch, the rank's shard of it on `device`.
  Batch next(int step, torch::Device device);

 private:
  std::string check(const std::string& path) const;  // why the file cannot feed a step; "" when it can

  std::int64_t b_, S_, V_;
  std::uint64_t seed_;
  std::int64_t rows_, first_row_;
  SequenceShard shard_;
  std::vector<std::uint32_t> file_;
  std::int64_t cursor_ = 0;
};

}  // namespace longctx::runtime
