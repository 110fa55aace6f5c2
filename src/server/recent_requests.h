// RecentRequests: a bounded ring of the last completions the server ran, for the web page's
// request chart (GET /v1/requests/recent) and for other tools. Each RequestRecord is what the
// request's log line says, plus an estimate of the prefill time its cached tokens saved.
//
// Thread-safety: every method may be called from any thread (one mutex; no I/O under it).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "util/mutex.h"

namespace prefixd::server {

struct RequestRecord {
  uint64_t seq = 0;             // 1, 2, ...: set by Add, never reused
  int64_t time_unix_ms = 0;     // when it finished
  std::string id, route, tenant;  // tenant: the log label ("-" without keys)
  std::string session;          // the session key (session_key.h); "" when none
  int status = 200;
  bool stream = false;
  bool cancelled = false;
  std::string finish;           // the engine's finish_reason (stop, length, cancelled); "" on error
  int32_t prompt_tokens = 0, cached_tokens = 0, evaluated_tokens = 0, completion_tokens = 0;
  int32_t draft_tokens = 0, draft_accepted = 0;  // speculation: drafted and verified, taken
  std::string tier;             // cache::TierName: none, slot, ram, disk, remote
  std::string miss_reason;      // "" on a hit
  int32_t diverged_at = -1;     // > 0: where the prompt left the longest cached path
  std::string diverged;         // a few tokens of text either side of it
  double ttft_ms = -1;          // < 0: no text came
  double queue_ms = 0, prefill_ms = 0, restore_ms = 0, prompt_eval_ms = 0, total_ms = 0;
  // Estimated prefill time the cached tokens saved: cached_tokens times the server's mean
  // evaluation time per prompt token so far (this request's included), minus restore_ms;
  // never below 0. 0 while no token has been evaluated.
  double saved_ms = 0;
};

class RecentRequests {
 public:
  static constexpr size_t kDefaultCapacity = 256;
  explicit RecentRequests(size_t capacity = kDefaultCapacity);

  // Numbers the record, estimates saved_ms, and drops the oldest when full.
  void Add(RequestRecord record);
  // The records with seq > after, oldest first; only `*tenant`'s when not null.
  std::vector<RequestRecord> Since(uint64_t after, const std::string* tenant) const;

 private:
  size_t capacity_;
  mutable Mutex mu_;
  std::deque<RequestRecord> ring_ PREFIXD_GUARDED_BY(mu_);
  uint64_t next_seq_ PREFIXD_GUARDED_BY(mu_) = 1;
  double eval_ms_total_ PREFIXD_GUARDED_BY(mu_) = 0;  // over every request recorded, for saved_ms
  uint64_t evaluated_total_ PREFIXD_GUARDED_BY(mu_) = 0;
};

}  // namespace prefixd::server
