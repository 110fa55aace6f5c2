#include "engine/prefill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace prefixd::engine {
namespace {

// Classes as flash attention had them before llama.cpp patch 0013 (tiled from a whole tile):
// the functions are exercised with a short class too.
constexpr int32_t kFa = kMinCallRows;

// The calls a stretch [pos, limit) is decoded in.
std::vector<int32_t> Calls(int32_t pos, int32_t limit, uint32_t n_batch, uint32_t n_ubatch) {
  std::vector<int32_t> sizes;
  while (pos < limit) {
    const int32_t end = NextChunkEnd(pos, limit, n_batch, n_ubatch);
    EXPECT_GT(end, pos);
    EXPECT_LE(end, limit);
    sizes.push_back(end - pos);
    pos = end;
  }
  return sizes;
}

TEST(NextChunkEnd, ShortStretchIsOneCall) {
  EXPECT_EQ(Calls(0, 1, 2048, 512), std::vector<int32_t>({1}));
  EXPECT_EQ(Calls(100, 612, 2048, 512), std::vector<int32_t>({512}));
}

TEST(NextChunkEnd, LongStretchIsCutIntoUbatchesWithoutAShortRest) {
  EXPECT_EQ(Calls(0, 700, 2048, 512), std::vector<int32_t>({512, 188}));
  // 530 tokens: 448 and 82, not 512 and a rest of 18.
  EXPECT_EQ(Calls(0, 530, 2048, 512), std::vector<int32_t>({448, 82}));
  EXPECT_EQ(Calls(7, 7 + 1040, 2048, 512), std::vector<int32_t>({512, 448, 80}));
  // As many calls as llama.cpp's own ubatch split would make, none short unless all is.
  for (int32_t len : {513, 530, 575, 576, 1000, 2048, 2049, 9999}) {
    auto sizes = Calls(0, len, 2048, 512);
    EXPECT_EQ(sizes.size(), size_t((len + 511) / 512)) << len;
    for (int32_t s : sizes) EXPECT_GE(s, kMinCallRows) << len;
  }
  EXPECT_EQ(Calls(0, 40, 2048, 512), std::vector<int32_t>({40}));
}

TEST(NextChunkEnd, NeverExceedsTheBatch) {
  for (int32_t s : Calls(0, 5000, 300, 512)) EXPECT_LE(s, 300);
}

TEST(PrefillCuts, CapturePointsAndTheSpacingGrid) {
  const std::vector<int32_t> points = {0, 5, 300, 300, 1000, 1200};
  // 1024 is 24 after the message point 1000: it gives way.
  EXPECT_EQ(PrefillCuts(1100, points, 512), std::vector<int32_t>({5, 300, 512, 1000}));
  EXPECT_EQ(PrefillCuts(1300, std::vector<int32_t>{5, 300}, 512), std::vector<int32_t>({5, 300, 512, 1024}));
  EXPECT_EQ(PrefillCuts(512, {}, 512), std::vector<int32_t>({}));
}

// A grid point gives way to a message point or the prompt's end less than a tile
// (kMinCallRows) away, so that no call between them is short; message points all stay.
TEST(PrefillCuts, GridPointsLeaveNoShortCallBesideAMessagePoint) {
  // 512 is 11 after the message point 501, 1024 is 52 before 1076, 2048 is 40 before the end.
  const std::vector<int32_t> points = {300, 311, 501, 1076, 2080};
  EXPECT_EQ(PrefillCuts(2088, points, 512),
            std::vector<int32_t>({300, 311, 501, 1076, 1536, 2080}));
  // Away from message points the grid stays: 512 and 1024 are 64 from their neighbours.
  EXPECT_EQ(PrefillCuts(1200, std::vector<int32_t>{448, 1088}, 512), std::vector<int32_t>({448, 512, 1024, 1088}));
  // The only short calls left: between close message points and the generation prompt.
  const std::vector<int32_t> ends = PlanChunks(2088, PrefillCuts(2088, points, 512), 512, 512);
  for (size_t i = 0; i + 1 < ends.size(); ++i) {
    const int32_t start = i == 0 ? 0 : ends[i - 1];
    if (ends[i] != 311) EXPECT_GE(ends[i] - start, kMinCallRows) << "call ending at " << ends[i];
  }
}

TEST(PlanChunks, CallsEndAtEveryCutAndStayLong) {
  const std::vector<int32_t> cuts = {5, 300, 512, 1000, 1024};
  EXPECT_EQ(PlanChunks(1100, cuts, 512, 512),
            std::vector<int32_t>({5, 300, 512, 1000, 1024, 1100}));
  // A long stretch: ubatches without a short rest (NextChunkEnd).
  EXPECT_EQ(PlanChunks(1040, {}, 512, 512), std::vector<int32_t>({512, 960, 1040}));
  EXPECT_EQ(NextPlannedEnd(std::vector<int32_t>({512, 960, 1040}), 700), 960);
}

TEST(ExactRestoreFloor, KeepsTheClassOfTheCallItCutsInto) {
  // Calls [0,512) tiled, [512,540) short, [540,541) single, [541,700) tiled.
  const std::vector<int32_t> ends = {512, 540, 541, 700};
  EXPECT_EQ(ExactRestoreFloor(ends, 0, kFa), 0);
  EXPECT_EQ(ExactRestoreFloor(ends, 512, kFa), 512);      // a planned end
  EXPECT_EQ(ExactRestoreFloor(ends, 400, kFa), 400);      // 112 rows left: still tiled
  EXPECT_EQ(ExactRestoreFloor(ends, 460, kFa), 448);      // 52 would be short: 64 are kept
  EXPECT_EQ(ExactRestoreFloor(ends, 530, kFa), 530);      // 10 of a short call: short
  EXPECT_EQ(ExactRestoreFloor(ends, 539, kFa), 538);      // 1 row would be a single: 2
  EXPECT_EQ(ExactRestoreFloor(ends, 540, kFa), 540);
  EXPECT_EQ(ExactRestoreFloor(ends, 699, kFa), 636);      // the last token alone: 64 rows instead
  EXPECT_EQ(ExactRestoreFloor(ends, 700, kFa), 700);
  EXPECT_EQ(ExactRestoreFloor(ends, 40, kFa), 0);         // rows a short prompt may have computed
}

TEST(ExactRestoreFloor, NeverFurtherBackThanATile) {
  const std::vector<int32_t> cuts = {7, 9, 3000, 8990};
  const std::vector<int32_t> ends = PlanChunks(9000, cuts, 512, 512);
  for (int32_t p = kMinCallRows; p < 9000; ++p) {
    const int32_t q = ExactRestoreFloor(ends, p, kFa);
    EXPECT_LE(q, p);
    EXPECT_GT(q, p - kMinCallRows) << p;
    // From q, the first call ends at the planned end after q and is of the planned class.
    auto it = std::upper_bound(ends.begin(), ends.end(), q);
    const int32_t s = it == ends.begin() ? 0 : *(it - 1);
    EXPECT_EQ(ClassOf(*it - q, kFa), ClassOf(*it - s, kFa)) << p;
  }
}

TEST(ExactRestoreFloor, WhereOnlyASingleRowDiffersAsTheEngineRuns) {
  const std::vector<int32_t> ends = {512, 540, 541, 700};
  const int32_t batched = kTiledFrom;
  EXPECT_EQ(ExactRestoreFloor(ends, 460, batched), 460);
  EXPECT_EQ(ExactRestoreFloor(ends, 539, batched), 538);
  EXPECT_EQ(ExactRestoreFloor(ends, 699, batched), 698);
  EXPECT_EQ(ExactRestoreFloor(ends, 40, batched), 40);
  EXPECT_TRUE(ExactRestorePoint(ends, 500, batched));
  EXPECT_FALSE(ExactRestorePoint(ends, 699, batched));
}

TEST(ExactRestorePoint, BothSidesKeepTheClass) {
  const std::vector<int32_t> ends = {512, 540, 700};
  EXPECT_TRUE(ExactRestorePoint(ends, 0, kFa));
  EXPECT_TRUE(ExactRestorePoint(ends, 512, kFa));
  EXPECT_TRUE(ExactRestorePoint(ends, 200, kFa));         // 200 + 312: both tiled
  EXPECT_FALSE(ExactRestorePoint(ends, 30, kFa));         // 30 rows of a tiled call
  EXPECT_FALSE(ExactRestorePoint(ends, 500, kFa));        // 12 rows left
  EXPECT_TRUE(ExactRestorePoint(ends, 520, kFa));         // 8 + 20: both short
  EXPECT_FALSE(ExactRestorePoint(ends, 539, kFa));        // 1 row left: a single
}

TEST(SplitChunkAt, CutsOnlyWhereBothPartsKeepTheClass) {
  std::vector<int32_t> ends = {512, 540, 700};
  EXPECT_TRUE(SplitChunkAt(ends, 512, kFa));               // already an end
  EXPECT_TRUE(SplitChunkAt(ends, 200, kFa));
  EXPECT_FALSE(SplitChunkAt(ends, 500, kFa));
  EXPECT_TRUE(SplitChunkAt(ends, 520, kFa));
  EXPECT_FALSE(SplitChunkAt(ends, 539, kFa));
  EXPECT_TRUE(SplitChunkAt(ends, 700, kFa));               // the prompt's end is the last end
  EXPECT_FALSE(SplitChunkAt(ends, 701, kFa));
  EXPECT_EQ(ends, std::vector<int32_t>({200, 512, 520, 540, 700}));
}


TEST(ResumeLimit, ATileBeforeTheEndOfAnUncutScheduleSoThatEveryCallStaysTiled) {
  // 2000 tokens in ubatches of 512, no cuts (Snapshots captured inside calls): the last call
  // keeps a tile (1536 + 464).
  const std::vector<int32_t> ends = PlanChunks(2000, {}, 2048, 512);
  ASSERT_EQ(ends, std::vector<int32_t>({512, 1024, 1536, 2000}));
  EXPECT_EQ(ResumeLimit(ends, kFa), 2000 - kFa);
  // Every point up to the limit resumes in tiled calls; the next one (a chat's tail before a
  // short generation prompt, say) would leave a short call.
  for (int32_t p : {1, 300, 1536, 1700, 2000 - kFa}) {
    EXPECT_TRUE(ResumeChunks(ends, p, 2048, 512, kFa).has_value()) << p;
  }
  EXPECT_FALSE(ResumeChunks(ends, 2000 - kFa + 1, 2048, 512, kFa).has_value());
  // A prompt shorter than a tile is one short call: nothing inside it resumes exactly.
  EXPECT_EQ(ResumeLimit(PlanChunks(40, {}, 2048, 512), kFa), 0);
  // A schedule ending in a short call (one cut at a capture point): that call's start.
  EXPECT_EQ(ResumeLimit(PlanChunks(2000, std::vector<int32_t>{1996}, 2048, 512), kFa), 1996);
  // Without flash attention every call of 2 rows is tiled.
  EXPECT_EQ(ResumeLimit(ends, 2), 1998);
}

TEST(ResumeChunks, RetilesTheTiledStretchFromP) {
  // 2000 tokens in ubatches of 512, one cut at 1996 (a 4-token generation prompt after it).
  const std::vector<int32_t> ends = PlanChunks(2000, std::vector<int32_t>{1996}, 2048, 512);
  ASSERT_EQ(ends, std::vector<int32_t>({512, 1024, 1536, 1996, 2000}));
  // A planned end or 0: the plan as it is.
  EXPECT_EQ(*ResumeChunks(ends, 1024, 2048, 512, kFa), ends);
  EXPECT_EQ(*ResumeChunks(ends, 0, 2048, 512, kFa), ends);
  // Inside the tiled stretch: ubatches from p up to the cut, as few calls as from a call's start.
  EXPECT_EQ(*ResumeChunks(ends, 700, 2048, 512, kFa),
            std::vector<int32_t>({512, 1212, 1724, 1996, 2000}));
  EXPECT_EQ(*ResumeChunks(ends, 1000, 2048, 512, kFa),
            std::vector<int32_t>({512, 1512, 1996, 2000}));
  EXPECT_EQ(*ResumeChunks(ends, 300, 2048, 512, kFa),
            std::vector<int32_t>({812, 1324, 1836, 1996, 2000}));
  // Every resumed call is tiled.
  const std::vector<int32_t> resumed = *ResumeChunks(ends, 1500, 2048, 512, kFa);
  EXPECT_EQ(resumed, std::vector<int32_t>({512, 1024, 1996, 2000}));
  // Fewer than a tile before the short call, or inside it: no exact resume.
  EXPECT_FALSE(ResumeChunks(ends, 1990, 2048, 512, kFa).has_value());
  EXPECT_FALSE(ResumeChunks(ends, 1998, 2048, 512, kFa).has_value());
  // Without flash attention two rows are enough, and the generation prompt's call is tiled too.
  EXPECT_EQ(*ResumeChunks(ends, 1990, 2048, 512, 2), std::vector<int32_t>({512, 1024, 1536, 2000}));
  // A short planned call between cuts ends the stretch.
  const std::vector<int32_t> cuts = PlanChunks(1400, std::vector<int32_t>{1000, 1030}, 2048, 512);
  ASSERT_EQ(cuts, std::vector<int32_t>({512, 1000, 1030, 1400}));
  EXPECT_EQ(*ResumeChunks(cuts, 600, 2048, 512, kFa), std::vector<int32_t>({512, 1000, 1030, 1400}));
  EXPECT_EQ(*ResumeChunks(cuts, 1100, 2048, 512, kFa), std::vector<int32_t>({512, 1000, 1030, 1400}));
  EXPECT_FALSE(ResumeChunks(cuts, 1010, 2048, 512, kFa).has_value());
}

}  // namespace
}  // namespace prefixd::engine
