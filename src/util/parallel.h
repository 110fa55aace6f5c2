// ParallelFor: runs fn(0) .. fn(n - 1) on up to `max_threads` threads, the calling thread one of
// them, and returns when all have run. Item 0 runs on the calling thread (so it sees the
// caller's thread-local state); the others go to whichever thread is free next, in order.
// With max_threads <= 1 or n <= 1 every item runs on the calling thread, in order.
// REQUIRES: fn does not throw; items are independent of each other.
#pragma once

#include <cstddef>
#include <functional>

namespace prefixd {

void ParallelFor(size_t n, size_t max_threads, const std::function<void(size_t)>& fn);

// The threads ParallelFor may use for short CPU work beside the request path: the hardware's
// threads, at most `cap`, at least 1.
size_t SpareThreads(size_t cap);

}  // namespace prefixd
