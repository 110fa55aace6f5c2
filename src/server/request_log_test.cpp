#include "server/request_log.h"

#include <gtest/gtest.h>

namespace prefixd::server {
namespace {

// A client's string is echoed into a log line at most kMaxLoggedValueBytes long.
TEST(RequestLogTest, BoundsEveryValue) {
  const std::string huge(4 << 20, 'r');
  const LogLine line = LogLine("request").Add("role", huge);
  EXPECT_LT(line.text().size(), kMaxLoggedValueBytes + 100);
  EXPECT_NE(line.text().find("more bytes"), std::string::npos);
  EXPECT_EQ(BoundForLog("short"), "short");
  // Cut between whole UTF-8 characters: "é" is two bytes.
  std::string accents;
  while (accents.size() < kMaxLoggedValueBytes + 10) accents += "\xc3\xa9";
  const std::string cut = BoundForLog(accents);
  const size_t kept = cut.find("...(");
  ASSERT_NE(kept, std::string::npos);
  EXPECT_EQ(kept % 2, 0u);
  EXPECT_LE(kept, kMaxLoggedValueBytes);
}

}  // namespace
}  // namespace prefixd::server
