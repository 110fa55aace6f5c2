// TextStream: stop strings end the stream, are never emitted, and are reported.
#include "engine/chat/text_stream.h"

#include <gtest/gtest.h>

namespace prefixd::engine {
namespace {

TEST(TextStream, StopStringEndsTheStreamAndIsReported) {
  TextStream s({"END", "STOP"});
  std::string out = s.Push("Hello S");
  out += s.Push("TO");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.stop_word(), "");
  out += s.Push("P and more");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.stop_word(), "STOP");
  EXPECT_EQ(out, "Hello ");
  EXPECT_EQ(s.Push("x"), "");
  EXPECT_EQ(s.Finish(), "");
  EXPECT_EQ(s.text(), "Hello ");
}

TEST(TextStream, NoStopLeavesTheWordEmpty) {
  TextStream s({"END"});
  std::string out = s.Push("EN");
  out += s.Finish();
  EXPECT_EQ(out, "EN");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.stop_word(), "");
}

}  // namespace
}  // namespace prefixd::engine
