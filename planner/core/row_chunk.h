#pragma once
// Row chunks of the elementwise kernels (RMSNorm, SwiGLU's backward): a kernel that needs
// scratch beside its [rows, width] operands takes their rows a chunk at a time, so its scratch
// is bounded by a constant instead of growing with the sequence. The runtime cuts its loops
// with this function and the planner's footprints size the scratch with it: one definition,
// so predicted and allocated agree at every length.
#include <algorithm>
#include <cstdint>

namespace longctx {

// A chunk holds at most 32 MiB of scratch a buffer, small beside any long-context activation
// ([128K, 4096] bf16 is 1 GiB), and at most 2048 rows: max-context's bound samples lengths of
// at least two 1024-token tiles a rank for every model of hidden size 1024 or more
// (knobs.h, min_tile_tokens), where every chunk is then full, so each op's bytes stay affine
// in the length from the sampled lengths on, as that bound assumes. Chunks this large keep
// the number of kernel launches low (on a GPU each elementwise op of a chunk is a launch).
inline constexpr std::int64_t kRowChunkBytes = std::int64_t{32} << 20;
inline constexpr std::int64_t kRowChunkRows = 2048;

// Rows of a chunk over `rows` rows whose scratch takes `row_bytes` bytes a row: as many as fit
// in kRowChunkBytes, at most kRowChunkRows, at least 1 and at most `rows`. The last chunk
// holds what is left.
// REQUIRES: rows >= 1, row_bytes >= 1.
inline std::int64_t row_chunk(std::int64_t rows, std::int64_t row_bytes) {
  return std::clamp<std::int64_t>(std::min(kRowChunkRows, kRowChunkBytes / row_bytes), 1, rows);
}

}  // namespace longctx
