#include "util/buffer_pool.h"

#include <new>
#include <utility>

#include "util/memcopy.h"

namespace prefixd {

BufferPool& BufferPool::Shared() {
  static BufferPool* pool = new BufferPool(0);  // never destroyed: payloads outlive statics
  return *pool;
}

BufferPool::BufferPool(uint64_t limit) : limit_(limit) { stats_.limit = limit; }

void BufferPool::RaiseLimit(uint64_t limit) {
  MutexLock lock(&mu_);
  if (limit > limit_) limit_ = stats_.limit = limit;
}

std::vector<uint8_t> BufferPool::Take(size_t n) {
  std::vector<uint8_t> out;
  if (!TakeKept(n, &out)) ResizeForOverwrite(out, n);
  return out;
}

bool BufferPool::TakeKept(size_t n, std::vector<uint8_t>* out) {
  if (n < kMinBytes) return false;
  {
    MutexLock lock(&mu_);
    stats_.takes++;
    // The best fit: the smallest kept allocation that holds n without wasting over a quarter.
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (!Fits(it->capacity(), n)) continue;
      if (best == kept_.end() || it->capacity() < best->capacity()) best = it;
    }
    NoteLocked(n);  // served or not, the pool is one buffer short of this size
    if (best == kept_.end()) return false;
    *out = std::move(*best);
    kept_.erase(best);
    stats_.kept_bytes -= out->capacity();
    stats_.reused++;
  }
  out->resize(n);  // within its allocation: only bytes past its old size are written (zeros)
  return true;
}

void BufferPool::Give(std::vector<uint8_t>&& buf) {
  std::vector<uint8_t> take = std::move(buf);
  buf.clear();
  if (take.capacity() < kMinBytes) return;
  std::deque<std::vector<uint8_t>> freed;  // freed after the lock is let go
  {
    MutexLock lock(&mu_);
    if (take.capacity() > limit_) {
      stats_.dropped++;
    } else {
      while (stats_.kept_bytes + take.capacity() > limit_) {
        stats_.kept_bytes -= kept_.front().capacity();
        freed.push_back(std::move(kept_.front()));
        kept_.pop_front();
        stats_.dropped++;
      }
      stats_.kept_bytes += take.capacity();
      UnnoteLocked(take.capacity());
      kept_.push_back(std::move(take));
    }
  }
}

void BufferPool::UnnoteLocked(size_t size) {
  for (auto it = noted_.begin(); it != noted_.end(); ++it) {
    if (!Fits(size, *it)) continue;  // it would serve that size
    stats_.noted_bytes -= *it;
    noted_.erase(it);
    return;
  }
}

void BufferPool::NoteLocked(size_t n) {
  if (n > limit_) return;
  while (!noted_.empty() && stats_.noted_bytes + n > limit_) {
    stats_.noted_bytes -= noted_.front();
    noted_.pop_front();
  }
  noted_.push_back(n);
  stats_.noted_bytes += n;
  noted_cv_.notify_all();
}

bool BufferPool::AwaitNoted(const std::atomic<bool>& stop) {
  MutexLock lock(&mu_);
  while (noted_.empty() && !stop.load()) noted_cv_.Wait(lock);
  return !stop.load();
}

void BufferPool::Interrupt() {
  MutexLock lock(&mu_);  // a waiter between its check of `stop` and its wait holds the lock
  noted_cv_.notify_all();
}

bool BufferPool::WarmOne(const std::function<bool()>& stop) {
  size_t n = 0;
  {
    MutexLock lock(&mu_);
    if (noted_.empty()) return false;
    n = noted_.front();
    if (stats_.kept_bytes + n > limit_) {
      noted_.clear();
      stats_.noted_bytes = 0;
      return false;
    }
    noted_.pop_front();
    stats_.noted_bytes -= n;
  }
  constexpr size_t kPiece = size_t(4) << 20;  // ~7 ms on that VM: a request waits at most that
  std::vector<uint8_t> buf;
  try {  // the engine's idle loop calls this: no exception may leave it
    buf.reserve(n);
  } catch (const std::bad_alloc&) {
    return false;  // the size stays dropped: memory is short, nothing to warm into
  }
  if (!PopulatePieces(buf.data(), n, kPiece, stop)) {
    MutexLock lock(&mu_);
    noted_.push_front(n);
    stats_.noted_bytes += n;
    return false;
  }
  buf.resize(n);  // zeros written into present pages
  std::deque<std::vector<uint8_t>> freed;
  MutexLock lock(&mu_);
  if (stats_.kept_bytes + buf.capacity() > limit_) {  // filled by Give meanwhile
    freed.push_back(std::move(buf));
    return false;
  }
  stats_.kept_bytes += buf.capacity();
  stats_.warmed++;
  stats_.warmed_bytes += n;
  kept_.push_back(std::move(buf));
  return !noted_.empty();
}

void BufferPool::Clear() {
  std::deque<std::vector<uint8_t>> freed;  // freed after the lock is let go
  MutexLock lock(&mu_);
  freed.swap(kept_);
  stats_.kept_bytes = 0;
}

BufferPoolStats BufferPool::GetStats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace prefixd
