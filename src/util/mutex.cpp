#include "util/mutex.h"

namespace prefixd {

// The wait borrows the std::mutex the MutexLock holds (adopt_lock) and hands it back held
// (release): the MutexLock owns it again, as it did before.
void CondVar::Wait(MutexLock& lock) {
  assert(lock.held_);
  std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
  cv_.wait(native);
  native.release();
}

bool CondVar::WaitUntil(MutexLock& lock, std::chrono::steady_clock::time_point deadline) {
  assert(lock.held_);
  std::unique_lock<std::mutex> native(lock.mu_->mu_, std::adopt_lock);
  const bool notified = cv_.wait_until(native, deadline) == std::cv_status::no_timeout;
  native.release();
  return notified;
}

}  // namespace prefixd
