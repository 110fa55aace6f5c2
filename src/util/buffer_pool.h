// BufferPool: large byte buffers kept for reuse inside the process instead of going back to
// the kernel. A payload of megabytes read into fresh memory pays for its pages before its
// bytes: the kernel zeroes every page on its first touch (and on a VM whose freed memory the
// host takes back, backs it again), which measured more than the read itself: 76% of a
// shared-tier restore's time was clear_page (bench/results/shared-tier-restore-*.txt,
// docs/bench.md). The RAM tier frees payloads as it evicts and takes new ones as it restores
// and captures, so a buffer freed by one is, most of the time, the size the next one needs.
//
// Only buffers of at least kMinBytes are kept; at most `limit` bytes of them, the oldest given
// back dropped first. A taken buffer's bytes are whatever its last owner left (a fresh one's
// are zero): callers overwrite it whole.
//
// Warming: while a session grows, the RAM tier evicts nothing and every capture and publish
// takes fresh memory (~37 ms a 20 MB Snapshot on the VM of bench/results/, against ~6 ms to copy
// into memory already present). The pool refills what was taken from it: the size of every
// Take is noted (served or not), a buffer given back that fits a noted size strikes it, and
// WarmOne makes buffers of the sizes still noted present ahead of time, for a caller with
// nothing else to do: the engine between requests, so that the next request's payloads land
// in present memory. Noting only the Takes no kept buffer served would warm every other
// request: one that the warmed buffers served leaves nothing noted for the one after it. So
// the pool settles at the most the requests took at once (a re-prefill's burst of captures),
// within the limit. A process whose model leaves a host core free while it computes warms on a
// thread of its own as sizes are noted (PoolWarmer, util/pool_warmer.h: AwaitNoted, Interrupt).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "util/mutex.h"

namespace prefixd {

struct BufferPoolStats {
  uint64_t limit = 0;       // bytes the pool may keep
  uint64_t kept_bytes = 0;  // bytes it keeps now
  uint64_t takes = 0;       // Take calls of at least kMinBytes
  uint64_t reused = 0;      // of those, served by a kept buffer
  uint64_t dropped = 0;     // buffers given back and not kept (no room)
  uint64_t warmed = 0;      // buffers WarmOne kept
  uint64_t warmed_bytes = 0;
  uint64_t noted_bytes = 0;  // sizes taken and not refilled yet (warmed or given back)
};

class BufferPool {
 public:
  static constexpr size_t kMinBytes = size_t(1) << 20;

  // The process's pool (limit 0 until SetLimit: keeps nothing).
  static BufferPool& Shared();
  explicit BufferPool(uint64_t limit = 0);

  // Raises the limit to `limit` bytes when it is lower: several engines in one process share
  // the pool, the largest asking wins.
  void RaiseLimit(uint64_t limit);
  // A buffer of exactly `n` bytes: a kept one whose allocation (capacity) is at least `n` and at
  // most n + n / 4 bytes, sized to `n` (its bytes left as they were, any past its old size
  // zeroed), else a fresh one (zeroed, allocated as ResizeForOverwrite does). Kept buffers are
  // matched and counted by their allocation, not their size: a capture takes room for a trailer
  // that the payload it becomes uses only part of (a Snapshot's 8 bytes of the 64 taken), and
  // the payload given back must serve the next capture of its size.
  std::vector<uint8_t> Take(size_t n);
  // The kept half of Take: true with `*out` (empty before) a kept buffer sized to `n`; false,
  // leaving it empty, when none fits (the caller allocates as it likes).
  bool TakeKept(size_t n, std::vector<uint8_t>* out);
  // Keeps `buf` for a later Take when it is large enough and there is room (dropping the oldest
  // kept buffers for it); frees it otherwise. Leaves `buf` empty.
  void Give(std::vector<uint8_t>&& buf);
  // Makes one buffer of a size noted since (a Take or TakeKept, not yet refilled) present,
  // `stop` asked before each few MiB, and keeps it. True when it kept one and more sizes are
  // noted. False when none is noted; when the kept ones leave no room for it (the notes are
  // dropped: the pool is full of buffers to serve from); or when `stop` said true (the buffer
  // is freed, its size stays noted).
  bool WarmOne(const std::function<bool()>& stop);
  // Blocks until a size is noted (true) or `stop` reads true (false). A caller that sets `stop`
  // for a waiter calls Interrupt after it, which wakes every waiter to read its `stop`.
  bool AwaitNoted(const std::atomic<bool>& stop);
  void Interrupt();
  // Frees every kept buffer.
  void Clear();
  BufferPoolStats GetStats() const;

 private:
  // Take's fit: an allocation of `capacity` bytes serves `n` without wasting over a quarter.
  static bool Fits(size_t capacity, size_t n) { return capacity >= n && capacity <= n + n / 4; }
  void NoteLocked(size_t n) PREFIXD_REQUIRES(mu_);
  // A buffer of `size` bytes was kept: it refills the oldest noted size it would serve.
  void UnnoteLocked(size_t size) PREFIXD_REQUIRES(mu_);

  mutable Mutex mu_;
  uint64_t limit_ PREFIXD_GUARDED_BY(mu_);
  std::deque<std::vector<uint8_t>> kept_ PREFIXD_GUARDED_BY(mu_);  // oldest first
  std::deque<size_t> noted_ PREFIXD_GUARDED_BY(mu_);  // sizes to warm, oldest first
  CondVar noted_cv_;  // signalled as a size is noted, and by Interrupt
  BufferPoolStats stats_ PREFIXD_GUARDED_BY(mu_);
};

}  // namespace prefixd
