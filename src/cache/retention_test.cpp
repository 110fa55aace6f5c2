#include "cache/retention.h"

#include <gtest/gtest.h>

#include <set>

namespace prefixd::cache {
namespace {

constexpr size_t kB = 256;
const RetentionOptions kOpts{kB, 4};

std::vector<SnapshotPoint> Boundaries(size_t n_blocks) {
  std::vector<SnapshotPoint> pts;
  for (size_t k = 1; k <= n_blocks; ++k) pts.push_back({k * kB, SnapshotKind::kBlockBoundary});
  return pts;
}

TEST(RetentionTest, NewestBlocksStayDense) {
  size_t newest = 100 * kB;
  for (size_t k = 97; k <= 100; ++k) EXPECT_TRUE(OnRetentionLadder(k * kB, newest, kOpts)) << k;
}

TEST(RetentionTest, SpacingGrowsWithDistance) {
  size_t newest = 1000 * kB;
  // Distance 4..7 Blocks: spacing 1; 8..15: spacing 2; 16..31: spacing 4.
  EXPECT_TRUE(OnRetentionLadder(995 * kB, newest, kOpts));
  EXPECT_FALSE(OnRetentionLadder(991 * kB, newest, kOpts));  // distance 9, odd
  EXPECT_TRUE(OnRetentionLadder(990 * kB, newest, kOpts));
  EXPECT_FALSE(OnRetentionLadder(978 * kB, newest, kOpts));  // distance 22, 978 % 4 != 0
  EXPECT_TRUE(OnRetentionLadder(976 * kB, newest, kOpts));
}

TEST(RetentionTest, LadderIsLogarithmicFor100KTokens) {
  size_t n = 100000 / kB;  // 390 Blocks
  auto pts = Boundaries(n);
  size_t kept = 0;
  for (const auto& p : pts) kept += OnRetentionLadder(p.position, n * kB, kOpts);
  EXPECT_GE(kept, 20u);
  EXPECT_LE(kept, 40u);
}

TEST(RetentionTest, LadderOnlyThinsAsTheChainGrows) {
  for (size_t pos_block = 1; pos_block < 300; ++pos_block) {
    bool dropped = false;
    for (size_t newest = pos_block; newest < 600; ++newest) {
      bool on = OnRetentionLadder(pos_block * kB, newest * kB, kOpts);
      ASSERT_FALSE(dropped && on) << "block " << pos_block << " came back at " << newest;
      dropped |= !on;
    }
  }
}

TEST(RetentionTest, DropOrderListsOffLadderFirstOldestFirstAndNeverOtherKinds) {
  auto pts = Boundaries(64);
  pts.push_back({10 * kB + 17, SnapshotKind::kMessage});
  pts.push_back({20 * kB, SnapshotKind::kTail});
  pts[5].kind = SnapshotKind::kBranch;
  auto order = BoundaryDropOrder(pts, 64 * kB, kOpts);
  EXPECT_EQ(order.size(), 63u);  // 64 boundaries, one turned into a branch
  bool seen_on = false;
  size_t last_pos = 0;
  for (size_t i : order) {
    ASSERT_EQ(pts[i].kind, SnapshotKind::kBlockBoundary);
    bool on = OnRetentionLadder(pts[i].position, 64 * kB, kOpts);
    ASSERT_FALSE(seen_on && !on) << "off-ladder listed after on-ladder";
    if (on != seen_on) last_pos = 0;
    ASSERT_GT(pts[i].position, last_pos);
    last_pos = pts[i].position;
    seen_on = on;
  }
  // The newest Snapshot is the very last to go.
  EXPECT_EQ(pts[order.back()].position, 64 * kB);
}

TEST(RetentionTest, EmptyAndNonBoundaryInputs) {
  EXPECT_TRUE(BoundaryDropOrder({}, 0, kOpts).empty());
  std::vector<SnapshotPoint> pts = {{100, SnapshotKind::kMessage}};
  EXPECT_TRUE(BoundaryDropOrder(pts, 100, kOpts).empty());
}

}  // namespace
}  // namespace prefixd::cache
