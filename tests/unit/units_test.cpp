#include <gtest/gtest.h>

#include "planner/core/units.h"

namespace longctx {
namespace {

TEST(Units, TokensUsePowersOf1024) {
  EXPECT_EQ(parse_tokens("128K", "--seq").value(), 131072);
  EXPECT_EQ(parse_tokens("1M", "--seq").value(), 1048576);
  EXPECT_EQ(parse_tokens("3m", "--seq").value(), 3 * 1048576);
  EXPECT_EQ(parse_tokens("4096", "--seq").value(), 4096);
  EXPECT_EQ(parse_tokens("1.5M", "--seq").value(), 1572864);
}

TEST(Units, BytesTakeBinaryUnits) {
  EXPECT_EQ(parse_bytes("80GiB", "--budget").value(), 80LL << 30);
  EXPECT_EQ(parse_bytes("512MiB", "--budget").value(), 512LL << 20);
  EXPECT_EQ(parse_bytes("2TiB", "--host-mem").value(), 2LL << 40);
  EXPECT_EQ(parse_bytes("2T", "--host-mem").value(), 2LL << 40);
  EXPECT_EQ(parse_bytes("100", "--budget").value(), 100);
  EXPECT_EQ(parse_bytes("4PiB", "--budget").value(), 4LL << 50);  // the budgets' bound, as its message writes it
}

TEST(Units, BadSizesNameTheField) {
  for (const char* bad : {"", "abc", "0", "-5", "12Q", "0.3", "1.5.2M"}) {
    auto r = parse_tokens(bad, "--seq");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().field, "--seq");
    EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
  }
  // "GB" is ambiguous (10^9 or 2^30): refused with the unit to write instead.
  auto r = parse_bytes("80GB", "--budget");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("GiB"), std::string::npos);
  EXPECT_FALSE(parse_bytes("80 parsecs", "--budget").ok());
}

TEST(Units, FormatsRoundTrip) {
  EXPECT_EQ(format_tokens(131072), "128K");
  EXPECT_EQ(format_tokens(3 * 1048576), "3M");
  EXPECT_EQ(format_tokens(1000), "1000");
  // One compact form: M from 2^20 on (never "12864K"), K below.
  EXPECT_EQ(format_tokens(12864 * 1024), "12.56M");
  EXPECT_EQ(format_tokens(1536), "1.5K");
  EXPECT_EQ(format_count(12877824), "12,877,824");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(-1000), "-1,000");
  EXPECT_EQ(describe_tokens(12877824), "12,877,824 tokens (12.28M; M = 1,048,576)");
  EXPECT_EQ(describe_tokens(131072), "131,072 tokens (128K; K = 1,024)");
  EXPECT_EQ(describe_tokens(1000), "1,000 tokens");
  EXPECT_EQ(format_parameters(8030261248), "8.03B");
  EXPECT_EQ(format_parameters(109184), "109.2K");  // a tiny model is not "0.00B"
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(80LL << 30), "80.00 GiB");
}

}  // namespace
}  // namespace longctx
