#pragma once
// The row arithmetic the layers share: a chunk of rows sized like the planner's scratch, and
// the rows of one tile of a tiled MLP or loss. Private to runtime/src (norm_rope.cpp,
// mlp.cpp, loss.cpp).
#include <algorithm>
#include <cstdint>

#include <torch/torch.h>

#include "planner/core/parallel_config.h"
#include "planner/core/row_chunk.h"

namespace longctx::runtime {

// Rows of one chunk over `rows` rows of `row_bytes` scratch each (row_chunk.h: the planner
// sizes the scratch with the same function), or the caller's `chunk_rows` when it gives one.
inline std::int64_t rows_per_chunk(std::int64_t rows, std::int64_t row_bytes, std::int64_t chunk_rows) {
  if (rows < 1) return 1;
  return chunk_rows > 0 ? std::min(chunk_rows, rows) : row_chunk(rows, row_bytes);
}

// Rows [begin, begin+len) of a [n, ...] tensor.
inline torch::Tensor rows(const torch::Tensor& t, std::int64_t begin, std::int64_t len) { return t.narrow(0, begin, len); }

// Rows of tile i of a split (the planner's tile_split): all `rows`, the last one `last`.
inline std::int64_t tile_rows(const TileSplit& s, std::int64_t i) { return i + 1 < s.count ? s.rows : s.last; }

}  // namespace longctx::runtime
