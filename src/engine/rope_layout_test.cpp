#include "engine/rope_layout.h"

#include <gtest/gtest.h>

namespace prefixd::engine {
namespace {

TEST(RopeLayout, TextGoesOnAtTheImagesTimePlusItsSteps) {
  // Text 0..9, an image of 12 rows taking 4 steps at 10..21, text, another of 6 rows at 30..35
  // taking 3, text.
  const RopeLayout l({{10, 12, 4}, {30, 6, 3}});
  EXPECT_FALSE(l.identity());
  EXPECT_EQ(l.TimeAt(0), 0);
  EXPECT_EQ(l.TimeAt(9), 9);
  for (int32_t row = 10; row < 22; ++row) EXPECT_EQ(l.TimeAt(row), 10) << row;
  EXPECT_EQ(l.TimeAt(22), 14);  // 10 + 4 steps
  EXPECT_EQ(l.TimeAt(29), 21);
  for (int32_t row = 30; row < 36; ++row) EXPECT_EQ(l.TimeAt(row), 22) << row;
  EXPECT_EQ(l.TimeAt(36), 25);
  EXPECT_EQ(l.TimeAt(1000), 1000 - 8 - 3);
}

TEST(RopeLayout, ImagesThatTakeAStepARowAreTheIdentity) {
  const RopeLayout l({{5, 16, 16}});
  EXPECT_TRUE(l.identity());
  EXPECT_EQ(l.TimeAt(30), 30);
  EXPECT_EQ(l, RopeLayout());
  EXPECT_NE(RopeLayout({{5, 16, 4}}), RopeLayout({{6, 16, 4}}));
}

}  // namespace
}  // namespace prefixd::engine
