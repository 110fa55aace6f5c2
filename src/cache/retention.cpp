#include "cache/retention.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace prefixd::cache {

bool OnRetentionLadder(size_t position, size_t newest_position, const RetentionOptions& opts) {
  assert(opts.block_size > 0 && opts.dense_blocks > 0);
  size_t distance = position >= newest_position
                        ? 0
                        : (newest_position - position) / opts.block_size;
  if (distance < opts.dense_blocks) return true;
  size_t spacing = std::bit_floor(distance / opts.dense_blocks);  // 2^j for octave j
  return (position / opts.block_size) % spacing == 0;
}

std::vector<size_t> BoundaryDropOrder(std::span<const SnapshotPoint> points,
                                      size_t newest_position, const RetentionOptions& opts) {
  std::vector<size_t> off_ladder, on_ladder;
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].kind != SnapshotKind::kBlockBoundary) continue;
    bool keep = OnRetentionLadder(points[i].position, newest_position, opts);
    (keep ? on_ladder : off_ladder).push_back(i);
  }
  auto oldest_first = [&](size_t a, size_t b) {
    return points[a].position < points[b].position;
  };
  std::stable_sort(off_ladder.begin(), off_ladder.end(), oldest_first);
  std::stable_sort(on_ladder.begin(), on_ladder.end(), oldest_first);
  off_ladder.insert(off_ladder.end(), on_ladder.begin(), on_ladder.end());
  return off_ladder;
}

}  // namespace prefixd::cache
