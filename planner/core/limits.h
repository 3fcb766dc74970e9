#pragma once
// Upper bounds on every size the planner accepts. Each is far above any real Llama-family
// model or cluster, and together they keep every byte count the step graph and the simulator
// form inside std::int64_t: validation refuses anything beyond them (exit 2, naming the
// field and the bound), so the arithmetic downstream needs no overflow checks of its own.
#include <cstdint>

namespace longctx::limits {

inline constexpr std::int64_t kMaxHidden = std::int64_t{1} << 17;        // 131072; Llama 3.1 405B: 16384
inline constexpr std::int64_t kMaxIntermediate = std::int64_t{1} << 20;  // 405B: 53248
inline constexpr std::int64_t kMaxLayers = 1024;   // 405B: 126; also bounds the step graph's size
inline constexpr std::int64_t kMaxHeads = 1024;    // query (and so kv) heads; 405B: 128
inline constexpr std::int64_t kMaxHeadDim = 4096;  // real models: 64..256
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;         // 16M; the largest real ones: 262144
inline constexpr std::int64_t kMaxSeq = std::int64_t{1} << 40;           // tokens per sample
inline constexpr std::int64_t kMaxMicroBatch = std::int64_t{1} << 16;
inline constexpr std::int64_t kMaxGpus = std::int64_t{1} << 20;          // ranks in the cluster
inline constexpr std::int64_t kMaxGpusPerNode = 256;                     // NVL72 racks: 72
inline constexpr std::int64_t kMaxTiles = std::int64_t{1} << 20;         // mlp_tiles, loss_tiles
// 4 PiB: a memory size or budget, and the estimate of one rank's host bytes (validate()):
// times kMaxGpusPerNode, with the estimate's slack, it stays under 2^63.
inline constexpr std::int64_t kMaxBytes = std::int64_t{1} << 52;
// 256 PiB: the estimate of one rank's device bytes (validate()); reached only by hundreds
// of millions of tokens on one rank of the largest models.
inline constexpr std::int64_t kMaxStepBytes = std::int64_t{1} << 58;

}  // namespace longctx::limits
