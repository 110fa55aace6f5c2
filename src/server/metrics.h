// ServerMetrics: what the HTTP layer counts (requests by route and status, latencies,
// cancellations), rendered together with the engine's counters as Prometheus text
// (exposition format 0.0.4) for GET /metrics (an admin route when keys are on: the page is
// every tenant's). docs/http-api.md lists every name. It also keeps each tenant's own
// RequestCounters, for what GET /v1/cache and /v1/cache/stats show a tenant.
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "server/session_key.h"
#include "util/mutex.h"

namespace prefixd::server {

// The per-request counters of the engine's stats (EngineStats::requests to misses_by_reason):
// over every request (RequestCountersOf), or over one tenant's (ServerMetrics::TenantUsage).
struct RequestCounters {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, evaluated_tokens = 0, generated_tokens = 0;
  uint64_t draft_tokens = 0, draft_accepted = 0;
  uint64_t hits_slot = 0, hits_ram = 0, hits_disk = 0, hits_remote = 0;
  uint64_t restored_bytes = 0;
  uint64_t misses = 0;
  std::map<engine::CacheMiss, uint64_t> misses_by_reason;

  // Adds one finished request, counted as the engine counts every request (its scheduler's
  // CountRequest).
  void Add(const engine::CompletionResult& result);
};

// The engine's counters: every tenant's requests together.
RequestCounters RequestCountersOf(const engine::EngineStats& s);

// The memory each long-lived owner of the process holds, by owner name, sorted: the RAM tier
// and the buffer pool (from the engine's stats) and every MemoryGauge (util/process_memory.h).
std::vector<std::pair<std::string, uint64_t>> MemoryOwnersOf(const engine::EngineStats& s);

// The served model as vLLM's gauges name and size it (RenderVllm in metrics.cpp).
struct ServedModel {
  std::string name;             // their model_name label: the id /v1/models lists first
  uint32_t n_ctx_per_slot = 0;  // the KV cells each slot has
};

// vLLM's vllm:kv_cache_usage_perc: the fraction of the slots' KV cells that running requests
// hold, in [0, 1]. An idle slot's kept sequence counts as free, as vLLM counts its cached blocks
// that no request holds: the next request reuses or overwrites it. A running request counts its
// prompt (SlotView::n_tokens), not what it has generated so far.
double KvCacheUsage(const engine::EngineStats& s, uint32_t n_ctx_per_slot);

// What the KV-event stream (serve --kv-events, docs/kv-events.md) did with the cache's events:
// sent in a message, or dropped (its queue full, or the socket refused the message).
struct KvEventTotals {
  uint64_t published = 0;
  uint64_t dropped = 0;
};
// Appends prefixd_kv_events_total{outcome="published"|"dropped"}.
void RenderKvEvents(const KvEventTotals& totals, std::string* out);

// A Prometheus histogram with fixed upper bounds (seconds). Not thread-safe by itself.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the _bucket/_sum/_count lines; `labels` is "" or `k="v"` pairs without braces.
  void Render(const std::string& name, const std::string& labels, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative; one more for +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // One finished HTTP request. `route` is the matched route pattern ("other" for the rest).
  void RecordRequest(const std::string& route, int status, double seconds);
  // One finished completion (whatever its end), with its time to first token (< 0: none).
  void RecordCompletion(const engine::CompletionResult& result, double ttft_seconds);
  void RecordCancelled();
  // A connection refused by the per-address cap; a request cut by its read deadline
  // (connection_guard.h).
  void RecordConnectionRefused();
  void RecordReadDeadlineCut();
  // One completion's session key, by where it was found (session_key.h).
  void RecordSession(SessionSource source);

  // One finished request (a completion or a warm) of the tenant whose salt is `tenant_salt`
  // (auth.h), added to that tenant's counters. They are kept by the full salt, never by the
  // short log label, which two tenants may share. The map holds one entry per tenant that ran a
  // request: salts come only from the keys listed in the key files (one salt, "", without
  // keys), so it is bounded by the number of keys, which a restart alone changes.
  void RecordTenantUsage(const std::string& tenant_salt, const engine::CompletionResult& result);
  // That tenant's counters; all zero before its first request.
  RequestCounters TenantUsage(const std::string& tenant_salt) const;

  // The whole /metrics page: prefixd's names, then the gauges the routers built for vLLM read
  // (vllm:*, docs/http-api.md), labelled with `model`'s name.
  std::string Render(const engine::EngineStats& engine, const ServedModel& model) const;

 private:
  void RenderServer(std::string* out) const PREFIXD_REQUIRES(mu_);

  mutable Mutex mu_;
  // (route, status) -> count
  std::map<std::pair<std::string, int>, uint64_t> requests_ PREFIXD_GUARDED_BY(mu_);
  std::map<std::string, Histogram> duration_by_route_ PREFIXD_GUARDED_BY(mu_);
  Histogram ttft_ PREFIXD_GUARDED_BY(mu_);
  Histogram prefill_ PREFIXD_GUARDED_BY(mu_);
  Histogram queue_wait_ PREFIXD_GUARDED_BY(mu_);
  uint64_t cancelled_ PREFIXD_GUARDED_BY(mu_) = 0;
  uint64_t connections_refused_ PREFIXD_GUARDED_BY(mu_) = 0;
  uint64_t read_deadline_cuts_ PREFIXD_GUARDED_BY(mu_) = 0;
  std::map<SessionSource, uint64_t> sessions_by_source_ PREFIXD_GUARDED_BY(mu_);
  std::map<std::string, RequestCounters> by_tenant_ PREFIXD_GUARDED_BY(mu_);  // by salt
};

}  // namespace prefixd::server
