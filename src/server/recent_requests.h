// RecentRequests: the last completions the server ran, for the web page's request chart
// (GET /v1/requests/recent) and for other tools. Each RequestRecord is what the request's log
// line says, plus an estimate of the prefill time its cached tokens saved.
//
// Kept per tenant, by its full salt (auth.h; never by the short log label, which two tenants
// may share): each tenant has a ring of its own last `capacity` records, its own numbering and
// its own saved-time estimate, so nothing a tenant reads moves with another tenant's requests —
// not which of its records are still kept, not their numbers, not their estimates. Tenants are
// the keys listed in the key files (one, "", without keys), so at most (number of keys) x
// capacity records are kept.
//
// Thread-safety: every method may be called from any thread (one mutex; no I/O under it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "util/mutex.h"

namespace prefixd::server {

struct RequestRecord {
  uint64_t seq = 0;             // 1, 2, ...: set by Add, never reused (see Since)
  int64_t time_unix_ms = 0;     // when it finished
  std::string id, route, tenant;  // tenant: the log label ("-" without keys)
  std::string tenant_salt;      // whose it is (auth.h); never served, never logged
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
  // Estimated prefill time the cached tokens saved: cached_tokens times the mean evaluation
  // time per prompt token of its tenant's requests so far (this one included), minus
  // restore_ms; never below 0. 0 while none of them evaluated a token.
  double saved_ms = 0;
};

class RecentRequests {
 public:
  static constexpr size_t kDefaultCapacity = 256;
  // `capacity`: the records kept per tenant, and the most Since() returns.
  explicit RecentRequests(size_t capacity = kDefaultCapacity);

  // Numbers the record, estimates its saved_ms, and drops its tenant's oldest past capacity.
  void Add(RequestRecord record);
  // nullptr (an admin): every tenant's records with seq > after, numbered server-wide, oldest
  // first, at most the newest `capacity`. Else the records of the tenant whose salt is
  // *tenant_salt, numbered by that tenant's own count (its first request is 1, then 2, ...),
  // with that number > after, oldest first. Without keys the one tenant's numbers and the
  // server's are the same.
  std::vector<RequestRecord> Since(uint64_t after, const std::string* tenant_salt) const;

 private:
  // One tenant's records (seq: the server's number) and what its saved_ms estimates use.
  struct TenantLog {
    std::deque<std::pair<uint64_t, RequestRecord>> ring;  // (the tenant's number, record)
    uint64_t n_added = 0;
    double eval_ms_total = 0;
    uint64_t evaluated_total = 0;
  };
  std::vector<RequestRecord> AllSince(uint64_t after) const PREFIXD_REQUIRES(mu_);

  size_t capacity_;
  mutable Mutex mu_;
  std::map<std::string, TenantLog> tenants_ PREFIXD_GUARDED_BY(mu_);  // by salt
  uint64_t next_seq_ PREFIXD_GUARDED_BY(mu_) = 1;
};

}  // namespace prefixd::server
