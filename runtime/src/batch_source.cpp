// Synthetic or file tokens, sharded to the rank (batch_source.h).
#include "batch_source.h"

#include <cstring>

#include <fmt/format.h>

#include "common/atomic_file.h"
#include "common/input_file.h"

namespace longctx::runtime {

BatchSource::BatchSource(const Plan& p, const RunOptions& o, const Communicator& c)
    : b_(p.train.micro_batch * c.dp_size()),
      S_(p.train.seq),
      V_(p.model.vocab),
      seed_(o.seed),
      rows_(p.train.micro_batch),
      first_row_(p.train.micro_batch * c.dp_rank()),
      shard_(sequence_shard(p.train.seq, p.parallel, c.ring_rank(), c.sp_rank())) {}

Result<bool> BatchSource::load(const std::string& path) {
  if (path.empty()) return true;
  LONGCTX_TRY(auto bytes, read_regular_file(path, "--data", input_limits::kDataBytes));
  // A size that is no whole number of ids is another format (uint16 ids, text), whose bytes
  // read as uint32 would train on tokens nobody wrote.
  if (bytes.size() % sizeof(std::uint32_t) != 0)
    return Error::bad_input("--data", fmt::format("{} is {} bytes, not a whole number of uint32 token ids (4 bytes "
                                                  "each): write the ids as little-endian uint32, nothing else",
                                                  path, bytes.size()));
  file_.resize(bytes.size() / sizeof(std::uint32_t));
  std::memcpy(file_.data(), bytes.data(), file_.size() * sizeof(std::uint32_t));
  if (auto e = check(path); !e.empty()) return Error::bad_input("--data", e);
  return true;
}

std::string BatchSource::check(const std::string& path) const {
  if (static_cast<std::int64_t>(file_.size()) < b_ * S_ + 1)
    return fmt::format("{} holds {} tokens; a step needs {} ({} sample(s) of seq {}, one per data-parallel rank's "
                       "micro-batch row, + 1)",
                       path, file_.size(), b_ * S_ + 1, b_, S_);
  for (auto id : file_)
    if (static_cast<std::int64_t>(id) >= V_) return fmt::format("{} holds token id {} >= the vocabulary {}", path, id, V_);
  return "";
}

Batch BatchSource::next(int step, torch::Device device) {
  torch::Tensor all;  // [b, S + 1] int64: the world's samples, targets one token on
  if (file_.empty()) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ULL + static_cast<std::uint64_t>(step) + 1);
    all = at::randint(V_, {b_, S_ + 1}, gen, torch::TensorOptions().dtype(torch::kLong));
  } else {
    all = torch::empty({b_, S_ + 1}, torch::kLong);
    auto* a = all.data_ptr<std::int64_t>();
    const auto n = static_cast<std::int64_t>(file_.size());
    for (std::int64_t i = 0; i < b_ * (S_ + 1); ++i) a[i] = file_[static_cast<std::size_t>((cursor_ + i) % n)];
    cursor_ = (cursor_ + b_ * S_) % n;
  }
  auto [tokens, targets] = shard_batch(all.narrow(0, first_row_, rows_), shard_, device);  // padded: ulysses.h
  return {tokens, targets};
}

}  // namespace longctx::runtime
