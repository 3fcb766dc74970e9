// The one rule for every value of both programs (cli/common/parse_values.h), on an app built as
// longctx-runtime builds its options: a row's own range check first, then the rule. What the
// range check cannot read whole (hex, blanks, overflow) is the rule's to refuse, and numbers
// are decimal and finite.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/common/parse_values.h"

namespace longctx::cli {
namespace {

// The message a command line gets, or "" when it parses.
std::string parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  int steps = 1;
  double seconds = 0.5;
  std::string trace;
  app.add_option("--steps", steps)->check(CLI::Validator(
      [](std::string& v) {
        const auto n = value_rules::whole_number_or_defer(v);
        return !n || *n >= 1 ? std::string() : v + " is not a step count";
      },
      "N >= 1"));
  app.add_option("--seconds", seconds)->check(CLI::Range(0.01, 60.0));
  app.add_option("--trace", trace);
  apply_value_rules(app);
  args.insert(args.begin(), "test");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(ValueRules, TheRangeCheckLeavesWhatItCannotReadToTheRule) {
  EXPECT_EQ(parse({"--steps", "8"}), "");
  EXPECT_NE(parse({"--steps", "0"}).find("0 is not a step count"), std::string::npos);
  EXPECT_NE(parse({"--steps", "-3"}).find("-3 is not a step count"), std::string::npos);
  EXPECT_NE(parse({"--steps", "0x8"}).find("'0x8' is not a whole number"), std::string::npos) << parse({"--steps", "0x8"});
  EXPECT_NE(parse({"--steps", "99999999999999999999"}).find("is far above"), std::string::npos);
  EXPECT_NE(parse({"--steps", "512 "}).find("'512 ' has spaces around it"), std::string::npos);
  EXPECT_NE(parse({"--steps", " 512"}).find("' 512' has spaces around it"), std::string::npos);
  EXPECT_NE(parse({"--trace", ""}).find("--trace: is empty"), std::string::npos) << parse({"--trace", ""});
}

// An option with a default may be left out; a required one has none to fall back on, so its
// blank value is not told to (`export --stack ""` was).
TEST(ValueRules, ABlankRequiredValueIsNotToldToBeLeftOut) {
  for (const bool required : {false, true}) {
    CLI::App app{"test"};
    std::string stack = "longctx";
    auto* option = app.add_option("--stack", stack);
    if (required) option->required();
    apply_value_rules(app);
    const char* argv[] = {"test", "--stack", ""};
    std::string message;
    try {
      app.parse(3, argv);
    } catch (const CLI::ParseError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("--stack: is empty"), std::string::npos) << message;
    EXPECT_EQ(message.find("leave the option out") == std::string::npos, required) << message;
    EXPECT_EQ(message.find("the option has no default") != std::string::npos, required) << message;
  }
}

TEST(ValueRules, NumbersAreDecimalAndFinite) {
  EXPECT_EQ(parse({"--seconds", "0.5"}), "");
  EXPECT_EQ(parse({"--seconds", "2e-2"}), "");
  // CLI::Range reads nan and a hex float and lets them through (0x1p-3 is 0.125, in range;
  // every comparison with NaN is false): the rule refuses them.
  for (const char* bad : {"nan", "NaN", "0x1p-3"})
    EXPECT_NE(parse({"--seconds", bad}).find(std::string("'") + bad + "' is not a number"), std::string::npos)
        << bad << ": " << parse({"--seconds", bad});
  // inf is out of the range, which says so first.
  EXPECT_NE(parse({"--seconds", "inf"}).find("--seconds: "), std::string::npos);
}

TEST(ValueRules, WholeNumberOrDeferReadsOnlyPlainDecimal) {
  EXPECT_EQ(value_rules::whole_number_or_defer("42"), 42);
  EXPECT_EQ(value_rules::whole_number_or_defer("-3"), -3);
  EXPECT_EQ(value_rules::whole_number_or_defer("9223372036854775807"), std::numeric_limits<long long>::max());
  for (const char* defer : {"0x8", "-0x8", "", " 1", "1 ", "99999999999999999999", "-99999999999999999999", "1e3", "-"})
    EXPECT_FALSE(value_rules::whole_number_or_defer(defer)) << "'" << defer << "'";
}

}  // namespace
}  // namespace longctx::cli
