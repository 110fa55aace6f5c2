// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with the lock contracts
// of util/thread_annotations.h, so that clang checks who holds what (scripts/
// check-thread-safety.sh). Every mutex in src/ is one of these.
//
//   mutable Mutex mu_;
//   std::deque<Job> queue_ PREFIXD_GUARDED_BY(mu_);
//   CondVar cv_;  // signalled when queue_ grows
//
//   MutexLock lock(&mu_);
//   while (queue_.empty()) cv_.Wait(lock);
//
// Waits are written as explicit loops: clang analyses a predicate lambda as a function of its
// own, which does not hold the lock.
//
// Thread-safety: as std::mutex and std::condition_variable.
#pragma once

#include <cassert>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "util/thread_annotations.h"

namespace prefixd {

class PREFIXD_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Lockable, so that std:: lock templates work too; but only a MutexLock (or these calls
  // themselves) tells the analysis that the lock is held.
  void lock() PREFIXD_ACQUIRE() { mu_.lock(); }
  void unlock() PREFIXD_RELEASE() { mu_.unlock(); }
  bool try_lock() PREFIXD_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex from its construction to its destruction.
class PREFIXD_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) PREFIXD_ACQUIRE(mu) : mu_(mu) { mu->lock(); }
  // Takes over the lock the caller holds (after a try_lock that succeeded).
  MutexLock(Mutex* mu, std::adopt_lock_t) PREFIXD_REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() PREFIXD_RELEASE() {
    if (held_) mu_->unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets the lock go for a while (work outside it) and takes it again. REQUIRES: held for
  // Unlock, not held for Lock.
  void Unlock() PREFIXD_RELEASE() {
    assert(held_);
    held_ = false;
    mu_->unlock();
  }
  void Lock() PREFIXD_ACQUIRE() {
    assert(!held_);
    mu_->lock();
    held_ = true;
  }

 private:
  friend class CondVar;
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable whose waits take the MutexLock the caller holds. The wait releases the
// mutex and takes it again before it returns, as std::condition_variable's does; to the
// analysis the lock stays held throughout, which is what the code after the wait sees.
// Wake-ups may be spurious: wait in a loop that checks the condition.
class CondVar {
 public:
  // REQUIRES: `lock` holds its mutex.
  void Wait(MutexLock& lock);
  // As Wait, for at most `timeout` / until `deadline`. False when it timed out.
  template <class Rep, class Period>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout) {
    return WaitUntil(lock, std::chrono::steady_clock::now() + timeout);
  }
  bool WaitUntil(MutexLock& lock, std::chrono::steady_clock::time_point deadline);

  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace prefixd
