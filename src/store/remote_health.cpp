#include "store/remote_health.h"

#include <algorithm>
#include <cstdio>

namespace prefixd::store {

void RemoteHealth::ReportUp() {
  MutexLock lock(&mu_);
  backoff_ms_ = 0;
  if (state_ == State::kUp) return;
  state_ = State::kUp;
  std::fprintf(stderr, "prefixd: shared tier %s is up\n", name_.c_str());
}

void RemoteHealth::ReportDown(const std::string& why) {
  MutexLock lock(&mu_);
  backoff_ms_ = std::clamp(backoff_ms_ * 2, backoff_.min_ms, backoff_.max_ms);
  next_attempt_ = Clock::now() + std::chrono::milliseconds(backoff_ms_);
  if (state_ == State::kDown) return;
  state_ = State::kDown;
  downs_++;
  epoch_++;
  std::fprintf(stderr, "prefixd: shared tier %s is down (%s); serving from the local tiers\n",
               name_.c_str(), why.c_str());
}

bool RemoteHealth::MayConnect() const {
  MutexLock lock(&mu_);
  return Clock::now() >= next_attempt_;
}

uint64_t RemoteHealth::epoch() const {
  MutexLock lock(&mu_);
  return epoch_;
}

bool RemoteHealth::up() const {
  MutexLock lock(&mu_);
  return state_ == State::kUp;
}

uint64_t RemoteHealth::downs() const {
  MutexLock lock(&mu_);
  return downs_;
}

}  // namespace prefixd::store
