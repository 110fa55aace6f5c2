#include "util/idle_trimmer.h"

#include "util/process_memory.h"

namespace prefixd {

IdleTrimmer::IdleTrimmer(Options options) : options_(std::move(options)) {
  const uint64_t start = options_.activity();  // nothing done yet: nothing to give back
  thread_ = std::thread([this, start] { Loop(start); });
}

IdleTrimmer::~IdleTrimmer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void IdleTrimmer::Loop(uint64_t start) {
  uint64_t trimmed_at = start;
  uint64_t last = start;
  MutexLock lock(&mu_);
  while (!stop_) {
    const auto wake = std::chrono::steady_clock::now() + options_.poll;
    while (!stop_ && cv_.WaitUntil(lock, wake)) {
    }
    if (stop_) break;
    lock.Unlock();
    const uint64_t now = options_.activity();
    if (now == last && now != trimmed_at && !options_.busy()) {
      trimmed_bytes_ += options_.trim ? options_.trim() : TrimAllocator();
      ++trims_;
      trimmed_at = now;
    }
    last = now;
    lock.Lock();
  }
}

}  // namespace prefixd
