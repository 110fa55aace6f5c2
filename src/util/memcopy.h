// CopyStreaming: memcpy for bulk copies into memory nobody reads soon (a restore filling KV
// tensors, a payload read from disk). The destination is written with non-temporal stores, so
// its lines are neither read first nor left in the caches (glibc's memcpy does the same only
// above a size threshold, which the pieces of a restore are below: they measured ~20%
// slower than one memcpy of the same bytes). Ordered before return (sfence), so the bytes are
// visible to other threads as after memcpy. Falls back to memcpy off x86-64 and for small n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace prefixd {

void CopyStreaming(void* dst, const void* src, size_t n);

// Resizes an empty `buf` to `n` bytes that are about to be overwritten whole (a payload read
// from a socket or a file). Fresh memory of megabytes costs a page fault per 4 KiB page on its
// first touch, more than the read into it; here the allocation is asked for transparent huge
// pages (madvise, before anything touches it) over the 2 MiB-aligned part it spans, which
// faults once per 2 MiB (a 6 MB payload: two thirds of it).
// The bytes are zero, as resize() leaves them. Best effort: without huge pages, a plain resize.
// REQUIRES: buf.empty().
void ResizeForOverwrite(std::vector<uint8_t>& buf, size_t n);

}  // namespace prefixd
