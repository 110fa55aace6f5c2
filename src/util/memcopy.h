// CopyStreaming: memcpy for bulk copies into memory nobody reads soon (a restore filling KV
// tensors, a payload read from disk). The destination is written with non-temporal stores, so
// its lines are neither read first nor left in the caches (glibc's memcpy does the same only
// above a size threshold, which the pieces of a restore are below: they measured ~20%
// slower than one memcpy of the same bytes). Ordered before return (sfence), so the bytes are
// visible to other threads as after memcpy. Falls back to memcpy off x86-64 and for small n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace prefixd {

void CopyStreaming(void* dst, const void* src, size_t n);

// Reserves `n` bytes for an empty `v` that are about to be written whole (a payload read from
// a socket or a file). Fresh memory of megabytes costs a page fault per 4 KiB page on its
// first touch, more than the read into it: from 1 MiB up the pages are made present in one
// madvise(MADV_POPULATE_WRITE) call instead. Transparent huge pages were tried and measured
// worse for fresh memory on a VM (bench/results/shared-tier-restore-*.txt): a huge page's
// first touch cost ~5x its 512 small pages' there. Memory a restore reuses comes from the
// BufferPool (util/buffer_pool.h), already present. Best effort on older kernels.
void ReservePopulated(std::vector<uint8_t>* v, size_t n);
// ReservePopulated, then resize(): `n` zero bytes.
void ResizeForOverwrite(std::vector<uint8_t>& buf, size_t n);
// Makes the pages wholly inside [p, p + n) present as ReservePopulated does, `piece` bytes at a
// time, asking `stop` before each piece: false when it said true (the rest left absent).
bool PopulatePieces(void* p, size_t n, size_t piece, const std::function<bool()>& stop);

}  // namespace prefixd
