// Snapshot retention: which kBlockBoundary Snapshots of one chain to drop under memory
// pressure.
//
// Policy ("ladder"): counted in Blocks back from the chain's newest position, the newest
// `dense_blocks` boundary Snapshots are all kept; further back, in each octave of distance
// [dense*2^j, dense*2^(j+1)) Blocks, only Block indices that are multiples of 2^j are kept.
// About dense*(1 + log2(n/dense)) boundary Snapshots stay on the ladder for a chain of n
// Blocks (~30 for 100K tokens at B=256, dense=4). Because the spacing is a power of two fixed
// by absolute Block index, the ladder only thins as the chain grows: a Snapshot dropped once
// is never wanted back.
//
// Drop order: first the boundary Snapshots off the ladder, then those on it, oldest first in
// each group. Snapshots of any other kind (message, tail, branch, generation end) are never
// listed: the cache drops them only after every boundary Snapshot of their chain is gone.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "cache/types.h"

namespace prefixd::cache {

struct SnapshotPoint {
  size_t position = 0;  // tokens before the Snapshot
  SnapshotKind kind = SnapshotKind::kBlockBoundary;
};

struct RetentionOptions {
  size_t block_size = 256;  // REQUIRES: > 0
  size_t dense_blocks = 4;  // REQUIRES: > 0
};

// True when a boundary Snapshot at `position` stays on the ladder of a chain whose newest
// position is `newest_position`.
bool OnRetentionLadder(size_t position, size_t newest_position, const RetentionOptions& opts);

// Indices into `points` of the kBlockBoundary Snapshots in the order they should be dropped.
std::vector<size_t> BoundaryDropOrder(std::span<const SnapshotPoint> points,
                                      size_t newest_position, const RetentionOptions& opts);

}  // namespace prefixd::cache
