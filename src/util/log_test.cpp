#include "util/log.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace prefixd {
namespace {

class CaptureSink : public LogSink {
 public:
  void Write(LogLevel level, std::string_view message) override {
    lines.emplace_back(level, std::string(message));
  }
  std::vector<std::pair<LogLevel, std::string>> lines;
};

TEST(Log, InstalledSinkCapturesFormattedMessage) {
  CaptureSink sink;
  {
    ScopedLogSink scoped(&sink);
    Logf(LogLevel::kWarning, "restore of %zu tokens refused: %s", size_t(42), "bad rows");
    Log(LogLevel::kInfo, "disk tier open");
  }
  ASSERT_EQ(sink.lines.size(), 2u);
  EXPECT_EQ(sink.lines[0].first, LogLevel::kWarning);
  EXPECT_EQ(sink.lines[0].second, "restore of 42 tokens refused: bad rows");
  EXPECT_EQ(sink.lines[1].first, LogLevel::kInfo);
  EXPECT_EQ(sink.lines[1].second, "disk tier open");
}

TEST(Log, ScopedSinkPutsBackThePreviousOne) {
  CaptureSink outer, inner;
  ScopedLogSink a(&outer);
  {
    ScopedLogSink b(&inner);
    Log(LogLevel::kInfo, "to inner");
  }
  Log(LogLevel::kInfo, "to outer");
  ASSERT_EQ(inner.lines.size(), 1u);
  EXPECT_EQ(inner.lines[0].second, "to inner");
  ASSERT_EQ(outer.lines.size(), 1u);
  EXPECT_EQ(outer.lines[0].second, "to outer");
}

TEST(Log, LongMessageIsNotCut) {
  CaptureSink sink;
  ScopedLogSink scoped(&sink);
  const std::string long_text(5000, 'x');
  Logf(LogLevel::kWarning, "%s!", long_text.c_str());
  ASSERT_EQ(sink.lines.size(), 1u);
  EXPECT_EQ(sink.lines[0].second, long_text + "!");
}

}  // namespace
}  // namespace prefixd
