// ServerMetrics: what the HTTP layer counts (requests by route and status, latencies,
// cancellations), rendered together with the engine's counters as Prometheus text
// (exposition format 0.0.4) for GET /metrics. docs/http-api.md lists every name.
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

  // The whole /metrics page.
  std::string Render(const engine::EngineStats& engine) const;

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
};

}  // namespace prefixd::server
