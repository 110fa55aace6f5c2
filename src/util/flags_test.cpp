#include "util/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace prefixd {
namespace {

// argv for Parse(): argv[0] is the program, flags start at `first`.
struct Argv {
  explicit Argv(std::vector<std::string> args) : strings(std::move(args)) {
    for (std::string& s : strings) ptrs.push_back(s.data());
  }
  int argc() const { return int(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
};

TEST(Flags, ParsesEveryKindAndForm) {
  std::string name = "x";
  int64_t n = 1;
  double ratio = 0.5;
  bool on = false;
  Flags flags("test", "a test");
  flags.String("-m,--model", &name, "the model");
  flags.Int("--n", &n, "a count");
  flags.Double("--ratio", &ratio, "a ratio");
  flags.Bool("--on", &on, "a switch");
  Argv a({"prefixd", "test", "-m", "tiny", "--n=42", "--ratio", "0.25", "--on"});
  ASSERT_TRUE(flags.Parse(a.argc(), a.argv()).ok());
  EXPECT_EQ(name, "tiny");
  EXPECT_EQ(n, 42);
  EXPECT_EQ(ratio, 0.25);
  EXPECT_TRUE(on);
  EXPECT_FALSE(flags.help_requested());
}

TEST(Flags, BadInputNamesTheFlag) {
  int64_t n = 1;
  Flags flags("test", "a test");
  flags.Int("--n", &n, "a count");
  Argv bad_int({"bench", "--n", "4x"});
  Status st = flags.Parse(bad_int.argc(), bad_int.argv(), 1);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("--n"), std::string::npos) << st.message();
  Argv unknown({"bench", "--m", "4"});
  st = flags.Parse(unknown.argc(), unknown.argv(), 1);
  EXPECT_NE(st.message().find("unknown flag '--m'"), std::string::npos) << st.message();
  Argv missing({"bench", "--n"});
  EXPECT_FALSE(flags.Parse(missing.argc(), missing.argv(), 1).ok());
  EXPECT_EQ(n, 1);
}

TEST(Flags, HelpListsDefaultsAndRunWithFlagsSkipsTheBody) {
  int64_t n = 7;
  Flags flags("test", "a test");
  flags.Int("--n", &n, "a count");
  EXPECT_NE(flags.Help().find("--n <value>\n      a count (default: 7)"), std::string::npos)
      << flags.Help();
  Argv help({"prefixd", "test", "--help"});
  bool ran = false;
  EXPECT_EQ(RunWithFlags(flags, help.argc(), help.argv(), [&] { ran = true; return 5; }), 0);
  EXPECT_FALSE(ran);
  Flags other("test", "a test");
  other.Int("--n", &n, "a count");
  Argv bad({"prefixd", "test", "--x"});
  EXPECT_EQ(RunWithFlags(other, bad.argc(), bad.argv(), [&] { return 5; }), 2);
  Argv good({"prefixd", "test", "--n", "3"});
  EXPECT_EQ(RunWithFlags(other, good.argc(), good.argv(), [&] { return 5; }), 5);
  EXPECT_EQ(n, 3);
}

TEST(Flags, ByteSizesParseInPowersOf1024AndPrintBack) {
  const std::vector<std::pair<std::string, uint64_t>> good = {
      {"123", 123},          {"64K", 64ull << 10}, {"512M", 512ull << 20}, {"2G", 2ull << 30},
      {"1T", 1ull << 40},    {"2GiB", 2ull << 30}, {"8kb", 8ull << 10},    {"1.5K", 1536},
      {"0", 0},
  };
  for (const auto& [text, bytes] : good) {
    Result<uint64_t> got = ParseByteSize("--size", text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status().ToString();
    EXPECT_EQ(*got, bytes) << text;
  }
  for (const std::string bad : {"", "G", "2X", "2GB2", "-1", "nan", "2KM", "99999999T"}) {
    Result<uint64_t> got = ParseByteSize("--size", bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().message(),
              "--size: expected a size such as 512M or 2G, got '" + bad + "'");
  }
  EXPECT_EQ(ByteSizeText(2ull << 30), "2G");
  EXPECT_EQ(ByteSizeText(20ull << 30), "20G");
  EXPECT_EQ(ByteSizeText(1536), "1536");
  EXPECT_EQ(ByteSizeText(0), "0");
  EXPECT_EQ(ByteSizeText(3ull << 50), "3072T");
  for (uint64_t bytes : std::vector<uint64_t>{0, 1000, 32ull << 20, 3ull << 50}) {
    EXPECT_EQ(*ParseByteSize("--size", ByteSizeText(bytes)), bytes);
  }
}

TEST(Flags, ListsSplitOnCommasWithoutBlanks) {
  EXPECT_EQ(SplitList("a, b,,c "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(SplitList("127.0.0.1:50052"), (std::vector<std::string>{"127.0.0.1:50052"}));
  EXPECT_TRUE(SplitList("").empty());
  EXPECT_TRUE(SplitList(" , ,").empty());
}

}  // namespace
}  // namespace prefixd
