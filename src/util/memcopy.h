// CopyStreaming: memcpy for bulk copies into memory nobody reads soon (a restore filling KV
// tensors, a payload read from disk). The destination is written with non-temporal stores, so
// its lines are neither read first nor left in the caches (glibc's memcpy does the same only
// above a size threshold, which the pieces of a restore are below: they measured ~20%
// slower than one memcpy of the same bytes). Ordered before return (sfence), so the bytes are
// visible to other threads as after memcpy. Falls back to memcpy off x86-64 and for small n.
#pragma once

#include <cstddef>

namespace prefixd {

void CopyStreaming(void* dst, const void* src, size_t n);

}  // namespace prefixd
