#pragma once
// Sizes as users write them. Token counts take K and M as powers of 1024 (128K = 131072);
// byte sizes take KiB/MiB/GiB/TiB (and K/M/G/T, read the same way).
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace longctx {

// "128K" -> 131072, "3M" -> 3145728, "4096" -> 4096. Zero or negative is an error.
Result<std::int64_t> parse_tokens(std::string_view text, std::string_view field);
// "80GiB" -> 85899345920. Zero or negative is an error.
Result<std::int64_t> parse_bytes(std::string_view text, std::string_view field);

// 85899345920 -> "80.00 GiB"; exact below 1 KiB.
std::string format_bytes(std::int64_t bytes);
// Token counts are written one way everywhere: exact with thousands separators, then in K or
// M (powers of 1024, as --seq reads them), the base stated once where a count is described.
// 3145728 -> "3M", 12877824 -> "12.28M", 131072 -> "128K", 1536 -> "1.5K", 1000 -> "1000".
std::string format_tokens(std::int64_t tokens);
// 12877824 -> "12,877,824".
std::string format_count(std::int64_t n);
// 12877824 -> "12,877,824 tokens (12.28M; M = 1,048,576)"; 1000 -> "1,000 tokens".
std::string describe_tokens(std::int64_t tokens);
// Parameters in powers of 1000: 8030261248 -> "8.03B", 2400000 -> "2.40M", 109184 -> "109.2K".
std::string format_parameters(std::int64_t n);

}  // namespace longctx
