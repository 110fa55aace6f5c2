#include "server/model_window.h"

#include <gtest/gtest.h>

namespace prefixd::server {
namespace {

TEST(ModelWindowTest, AnEighthOfTheWindowWithinBoundsOrTheOperatorsCap) {
  EXPECT_EQ(ModelWindowOf(16384, 0).context, 16384);
  EXPECT_EQ(ModelWindowOf(16384, 0).max_output, 2048);
  EXPECT_EQ(ModelWindowOf(4096, 0).max_output, 1024);
  EXPECT_EQ(ModelWindowOf(1 << 20, 0).max_output, 32000);
  EXPECT_EQ(ModelWindowOf(32768, 500).max_output, 500);
  // Never more than half the window, whatever -n says.
  EXPECT_EQ(ModelWindowOf(2048, 0).max_output, 1024);
  EXPECT_EQ(ModelWindowOf(2048, 100000).max_output, 1024);
}

}  // namespace
}  // namespace prefixd::server
