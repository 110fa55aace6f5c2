#include "engine/cache_io.h"
#include "engine/cache_stack.h"

#include <gtest/gtest.h>

#include <vector>

namespace prefixd::engine {
namespace {

using cache::SnapshotKind;

std::vector<int32_t> Positions(const std::vector<CapturePoint>& pts) {
  std::vector<int32_t> out;
  for (const auto& p : pts) out.push_back(p.pos);
  return out;
}

Prompt PromptOf(int32_t n, std::vector<int32_t> points) {
  Prompt p;
  p.tokens.assign(size_t(n), 1);
  p.capture_points = std::move(points);
  return p;
}

CacheIoOptions Hybrid() {
  CacheIoOptions o;
  o.needs_snapshot = true;
  return o;
}

TEST(PlanCaptures, AttentionOnlyKeepsMessagePointsOnly) {
  CacheIoOptions o;  // needs_snapshot false
  auto pts = PlanCaptures(PromptOf(5000, {300, 2100, 4990}), 0, -1, o);
  EXPECT_EQ(Positions(pts), std::vector<int32_t>({300, 2100, 4990}));
  EXPECT_EQ(pts.back().kind, SnapshotKind::kTail);
}

TEST(PlanCaptures, HybridsAlsoSnapshotEverySpacingStepAndAtTheEnd) {
  auto pts = PlanCaptures(PromptOf(7000, {300, 2100, 4050, 6990}), 0, -1, Hybrid());
  EXPECT_EQ(Positions(pts),
            std::vector<int32_t>({300, 2048, 2100, 4050, 4096, 6144, 6990, 7000}));
  for (const auto& p : pts) {
    if (p.pos % 2048 == 0) EXPECT_EQ(p.kind, SnapshotKind::kBlockBoundary);
  }
  EXPECT_EQ(pts.back().kind, SnapshotKind::kGenerationEnd);
}

TEST(PlanCaptures, NothingAtOrBeforeTheRestoredPrefix) {
  auto pts = PlanCaptures(PromptOf(7000, {300, 2100, 6990}), 4096, -1, Hybrid());
  EXPECT_EQ(Positions(pts), std::vector<int32_t>({6144, 6990, 7000}));
  pts = PlanCaptures(PromptOf(5000, {}), 4200, -1, Hybrid());
  EXPECT_EQ(Positions(pts), std::vector<int32_t>({5000}));
}

TEST(PlanCaptures, BranchPointKept) {
  auto pts = PlanCaptures(PromptOf(3000, {100, 2990}), 0, 1500, Hybrid());
  EXPECT_EQ(Positions(pts), std::vector<int32_t>({100, 1500, 2048, 2990, 3000}));
  EXPECT_EQ(pts[1].kind, SnapshotKind::kBranch);
}

// Captured inside calls, the boundary grid is the fewest Blocks whose rows weigh a Snapshot.
TEST(InCallSnapshotSpacing, TheFewestBlocksWhoseRowsWeighASnapshot) {
  StateShape hybrid;
  hybrid.layers = {LayerShape{1, 64, 1, 64, 0, 0}, LayerShape{1, 64, 1, 64, 0, 0}};  // 256 B/token
  hybrid.recurrent_bytes = 256 * 256;  // a Block of 256 tokens' rows
  EXPECT_EQ(InCallSnapshotSpacing(hybrid, 0, 256, 2048), 256u);
  EXPECT_EQ(InCallSnapshotSpacing(hybrid, 0, 32, 2048), 256u);  // 8 Blocks of 32
  hybrid.recurrent_bytes = 256 * 256 + 1;  // a byte more: a Block more
  EXPECT_EQ(InCallSnapshotSpacing(hybrid, 0, 256, 2048), 512u);
  hybrid.recurrent_bytes = 1ull << 40;  // never past the grid of the cuts
  EXPECT_EQ(InCallSnapshotSpacing(hybrid, 0, 256, 2048), 2048u);
  StateShape window;  // a sliding window of 1024 cells, as heavy per cell as a row
  window.layers = {LayerShape{1, 128, 1, 128, 0, 0}};
  window.swa_layers = {LayerShape{1, 128, 1, 128, 0, 0}};
  EXPECT_EQ(InCallSnapshotSpacing(window, 1024, 256, 2048), 1024u);
  EXPECT_EQ(InCallSnapshotSpacing(window, 64, 256, 2048), 256u);
}

}  // namespace
}  // namespace prefixd::engine
