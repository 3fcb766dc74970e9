#include "planner/core/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <fmt/format.h>

namespace longctx {

int exit_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadInput: return 2;
    case ErrorKind::NoFit: return 3;
    case ErrorKind::Internal: return 1;
  }
  return 1;
}

namespace {

// Splits "12.5GiB" into 12.5 and "gib" (lower case).
bool split_number(std::string_view text, double& number, std::string& suffix) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, number);
  if (ec != std::errc() || ptr != text.data() + i) return false;
  suffix.clear();
  for (char c : text.substr(i))
    if (c != ' ') suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return true;
}

Result<std::int64_t> scaled(std::string_view text, std::string_view field, double number,
                            double scale, std::string_view examples) {
  double v = number * scale;
  // Past what a signed 64-bit count holds (and far past every bound the options name).
  if (v > 9.0e18)
    return Error::bad_input(std::string(field), fmt::format("'{}' is too large; write it like {}", text, examples));
  if (!(v >= 1.0) || std::floor(v) != v)
    return Error::bad_input(std::string(field),
                            fmt::format("'{}' is not a positive whole size; write it like {}", text, examples));
  return static_cast<std::int64_t>(v);
}

}  // namespace

Result<std::int64_t> parse_tokens(std::string_view text, std::string_view field) {
  constexpr std::string_view examples = "4096, 128K or 3M (K = 1024)";
  double n = 0;
  std::string s;
  if (!split_number(text, n, s))
    return Error::bad_input(std::string(field), fmt::format("'{}' is not a token count; write it like {}", text, examples));
  double scale = 0;
  if (s.empty()) scale = 1;
  else if (s == "k") scale = 1024.0;
  else if (s == "m") scale = 1024.0 * 1024.0;
  else if (s == "g") scale = 1024.0 * 1024.0 * 1024.0;
  else
    return Error::bad_input(std::string(field), fmt::format("unknown suffix in '{}'; write it like {}", text, examples));
  return scaled(text, field, n, scale, examples);
}

Result<std::int64_t> parse_bytes(std::string_view text, std::string_view field) {
  constexpr std::string_view examples = "80GiB, 512MiB or 2TiB";
  double n = 0;
  std::string s;
  if (!split_number(text, n, s))
    return Error::bad_input(std::string(field), fmt::format("'{}' is not a size; write it like {}", text, examples));
  double scale = 0;
  if (s.empty() || s == "b") scale = 1;
  else if (s == "k" || s == "kib") scale = 1024.0;
  else if (s == "m" || s == "mib") scale = 1024.0 * 1024.0;
  else if (s == "g" || s == "gib") scale = 1024.0 * 1024.0 * 1024.0;
  else if (s == "t" || s == "tib") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  else if (s == "p" || s == "pib") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0;  // the budgets' bound is 4PiB
  else
    return Error::bad_input(std::string(field), fmt::format("unknown unit in '{}'; write it like {}", text, examples));
  return scaled(text, field, n, scale, examples);
}

std::string format_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const double a = std::fabs(b);
  if (a < 1024.0) return fmt::format("{} B", bytes);
  if (a < 1024.0 * 1024) return fmt::format("{:.2f} KiB", b / 1024.0);
  if (a < 1024.0 * 1024 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (a < 1024.0 * 1024 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  return fmt::format("{:.2f} TiB", b / (1024.0 * 1024 * 1024 * 1024));
}

std::string format_tokens(std::int64_t tokens) {
  constexpr std::int64_t K = 1024, M = K * K;
  if (tokens >= M) return tokens % M == 0 ? fmt::format("{}M", tokens / M) : fmt::format("{:.2f}M", double(tokens) / M);
  if (tokens >= K) return tokens % K == 0 ? fmt::format("{}K", tokens / K) : fmt::format("{:.1f}K", double(tokens) / K);
  return fmt::format("{}", tokens);
}

std::string format_count(std::int64_t n) {
  std::string digits = fmt::format("{}", n < 0 ? -n : n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string describe_tokens(std::int64_t tokens) {
  constexpr std::int64_t K = 1024, M = K * K;
  if (tokens < K) return fmt::format("{} tokens", format_count(tokens));
  return fmt::format("{} tokens ({}; {} = {})", format_count(tokens), format_tokens(tokens), tokens >= M ? "M" : "K",
                     format_count(tokens >= M ? M : K));
}

std::string format_parameters(std::int64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return fmt::format("{:.2f}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}K", v / 1e3);
  return fmt::format("{}", n);
}

}  // namespace longctx
