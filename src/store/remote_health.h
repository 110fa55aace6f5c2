// RemoteHealth: whether the shared tier answers, as its connections last found it, and when
// they may try to connect again. Shared by every connection to one Redis, so that one lost
// connection marks them all stale (a killed Redis is noticed once, not once per connection),
// one backoff paces the reconnects, and the log gets one line per change of state, never one
// per failed request.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "util/mutex.h"

namespace prefixd::store {

struct BackoffOptions {
  int min_ms = 100;
  int max_ms = 5000;
};

class RemoteHealth {
 public:
  RemoteHealth(std::string name, BackoffOptions backoff) : name_(std::move(name)), backoff_(backoff) {}

  // A connection succeeded or a command was answered: up, and the backoff is reset.
  void ReportUp();
  // A connection could not be made or was lost: down (a new epoch when it was up), and the
  // next attempt waits for the backoff, which doubles up to max_ms. `why` goes into the log.
  void ReportDown(const std::string& why);
  // False while backing off: callers fail at once without I/O.
  bool MayConnect() const;
  // Bumped each time the tier goes down: a connection made in an older epoch is stale.
  uint64_t epoch() const;

  bool up() const;
  uint64_t downs() const;  // changes to down (the first failure too)

 private:
  using Clock = std::chrono::steady_clock;
  enum class State { kUnknown, kUp, kDown };
  const std::string name_;
  const BackoffOptions backoff_;
  mutable Mutex mu_;
  State state_ PREFIXD_GUARDED_BY(mu_) = State::kUnknown;
  uint64_t downs_ PREFIXD_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ PREFIXD_GUARDED_BY(mu_) = 0;
  int backoff_ms_ PREFIXD_GUARDED_BY(mu_) = 0;
  Clock::time_point next_attempt_ PREFIXD_GUARDED_BY(mu_) = {};
};

}  // namespace prefixd::store
