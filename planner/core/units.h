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
// 3145728 -> "3M", 131072 -> "128K", 1000 -> "1000".
std::string format_tokens(std::int64_t tokens);

}  // namespace longctx
