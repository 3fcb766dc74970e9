#include "planner/core/parallel_config.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace longctx {

std::string to_string(Sharding s) {
  switch (s) {
    case Sharding::None: return "none";
    case Sharding::Zero1: return "zero1";
    case Sharding::Zero2: return "zero2";
    case Sharding::Zero3: return "zero3";
  }
  return "none";
}

Result<Sharding> parse_sharding(const std::string& text, const std::string& field) {
  if (text == "none") return Sharding::None;
  if (text == "zero1") return Sharding::Zero1;
  if (text == "zero2") return Sharding::Zero2;
  if (text == "zero3" || text == "fsdp") return Sharding::Zero3;
  return Error::bad_input(field, fmt::format("'{}' is unknown; use none, zero1, zero2 or zero3", text));
}

std::string to_string(const CheckpointPolicy& c) {
  switch (c.kind) {
    case CheckpointPolicy::Kind::None: return "none";
    case CheckpointPolicy::Kind::Full: return "full";
    case CheckpointPolicy::Kind::EveryK: return fmt::format("every:{}", c.every);
    case CheckpointPolicy::Kind::Ops: return "op";
  }
  return "none";
}

Result<CheckpointPolicy> parse_checkpoint(const std::string& text, const std::string& field) {
  if (text == "none") return CheckpointPolicy::none();
  if (text == "full") return CheckpointPolicy::full();
  if (text == "op") return CheckpointPolicy::ops();
  if (text.rfind("every:", 0) == 0) {
    int k = 0;
    const char* b = text.data() + 6;
    const char* e = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(b, e, k);
    if (ec == std::errc() && ptr == e && k >= 1)
      return k == 1 ? CheckpointPolicy::full() : CheckpointPolicy::every_k(k);
  }
  return Error::bad_input(field, fmt::format("'{}' is unknown; use none, full, every:K (K >= 1) or op (--stack torchtitan)", text));
}

std::string to_string(RingExchange e) { return e == RingExchange::AllGather ? "allgather" : "p2p"; }

Result<RingExchange> parse_ring_exchange(const std::string& text, const std::string& field) {
  if (text == "p2p") return RingExchange::P2p;
  if (text == "allgather") return RingExchange::AllGather;
  return Error::bad_input(field, fmt::format("'{}' is unknown; use p2p or allgather", text));
}

int bytes_of(DType t) { return t == DType::BF16 ? 2 : 4; }
std::string to_string(DType t) { return t == DType::BF16 ? "bf16" : "fp32"; }
Result<DType> parse_dtype(const std::string& text, const std::string& field) {
  if (text == "bf16") return DType::BF16;
  if (text == "fp32") return DType::FP32;
  return Error::bad_input(field, fmt::format("'{}' is unknown; use bf16 or fp32", text));
}

std::int64_t padded_seq(std::int64_t seq, std::int64_t multiple) { return (seq + multiple - 1) / multiple * multiple; }
std::int64_t padding_tokens(std::int64_t seq, std::int64_t multiple) { return padded_seq(seq, multiple) - seq; }
std::int64_t tokens_per_rank(const TrainConfig& t, std::int64_t ulysses) {
  return t.micro_batch * (padded_seq(t.seq, ulysses) / ulysses);
}

std::int64_t sequence_ranks(const ParallelConfig& p) { return std::int64_t{p.ulysses} * p.ring; }
std::int64_t sequence_multiple(const ParallelConfig& p) {
  return p.ring > 1 ? 2 * sequence_ranks(p) : std::int64_t{p.ulysses};
}
std::int64_t padded_seq(std::int64_t seq, const ParallelConfig& p) { return padded_seq(seq, sequence_multiple(p)); }
std::int64_t padding_tokens(std::int64_t seq, const ParallelConfig& p) { return padding_tokens(seq, sequence_multiple(p)); }
std::int64_t tokens_per_rank(const TrainConfig& t, const ParallelConfig& p) {
  return t.micro_batch * (padded_seq(t.seq, p) / sequence_ranks(p));
}

TileSplit tile_split(std::int64_t n, std::int64_t tiles) {
  TileSplit s;
  s.rows = (n + tiles - 1) / tiles;
  s.count = (n + s.rows - 1) / s.rows;
  s.last = n - (s.count - 1) * s.rows;
  return s;
}

std::int64_t kv_heads_per_rank(const ModelConfig& m, int ulysses) {
  return m.kv_heads >= ulysses ? m.kv_heads / ulysses : 1;
}

}  // namespace longctx
