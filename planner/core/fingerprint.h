#pragma once
// A short, stable name for a text: FNV-1a 64 as 16 hex digits. It tells apart plans (and
// traces of them) that differ; it is not a defence against a forger.
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace longctx {

inline std::string fnv1a_64_hex(std::string_view text) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return fmt::format("{:016x}", h);
}

}  // namespace longctx
