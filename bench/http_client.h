// The bench's HTTP side: a client bound to one OpenAI-compatible endpoint, a reader for its
// streamed (SSE) answers, and a server process the bench launches itself.
//
// Thread-safety: an Endpoint is used by one thread at a time (give each concurrent stream its
// own); ServerProcess is not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "util/status.h"

namespace prefixd::bench {

using BenchClock = std::chrono::steady_clock;

double MillisBetween(BenchClock::time_point from, BenchClock::time_point to);

// Progress lines on stderr: "[HH:MM:SS] bench: ...".
void Progress(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// An HTTP client for `url` ("http://host:port"), sending "Authorization: Bearer KEY" when
// api_key is set. Reads wait up to timeout_s.
class Endpoint {
 public:
  Endpoint(const std::string& url, const std::string& api_key, int64_t timeout_s);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  bool valid() const;
  // The body of a 200 answer to POST path, as JSON; IOError otherwise.
  Result<nlohmann::json> PostJson(const std::string& path, const nlohmann::json& body);
  // GET /health answers 200.
  bool Healthy();
  // POST path with a streamed answer: `on_data` gets each chunk of the body as it arrives
  // (return false to stop). Returns the HTTP status.
  Result<int> PostStream(const std::string& path, const nlohmann::json& body,
                         const std::function<bool(const char*, size_t)>& on_data);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What a streamed chat completion showed the client. Times are milliseconds from `sent`.
struct StreamStats {
  std::optional<double> first_choice_ms;   // first SSE event carrying a choice (TTFT)
  std::optional<double> first_content_ms;  // first event with non-empty delta content
  std::optional<double> last_content_ms;   // last event with non-empty delta content
  int64_t content_events = 0;              // events with non-empty delta content
  // What the answer said, for comparing two servers' (or cache on / off) outputs: every
  // delta's reasoning_content, content and tool_calls (as JSON) in order of arrival.
  std::string output;
  nlohmann::json usage, timings, error;    // the last "usage" / "timings" / "error" seen
  std::string raw_head;                    // the first bytes, for error messages
};

// Splits an SSE body into events and fills StreamStats from them.
class SseReader {
 public:
  explicit SseReader(BenchClock::time_point sent) : sent_(sent) {}
  // Feeds a chunk of the body; always true (the callback contract of Endpoint::PostStream).
  bool Feed(const char* data, size_t n);
  const StreamStats& stats() const { return stats_; }

 private:
  void OnEvent(const std::string& event);
  void OnData(const nlohmann::json& j);

  BenchClock::time_point sent_;
  std::string buf_;
  StreamStats stats_;
};

// A server the bench launches: `sh -c cmd` in its own process group, output appended to `log`
// ("" keeps the bench's own). Stop() sends SIGTERM to the group (prefixd flushes its disk tier
// then) and SIGKILL after 120 s; the destructor stops it.
class ServerProcess {
 public:
  ServerProcess(std::string cmd, std::string log) : cmd_(std::move(cmd)), log_(std::move(log)) {}
  ~ServerProcess() { Stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the command and waits until `ep` answers /health, at most timeout_s.
  Status Start(Endpoint& ep, int64_t timeout_s);
  void Stop();

 private:
  [[noreturn]] void ExecChild();

  std::string cmd_;
  std::string log_;
  pid_t pid_ = -1;
};

// Where the replay finds a server: `url`, and optionally a command that starts it.
struct ServerOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  std::string model;       // "model" sent in requests; "" leaves it out
  std::string label;       // the server's name in logs and reports
  std::string server_cmd;  // "" when the server runs already
  std::string server_log;
  std::string decode_log;  // bench/decode_counter.cpp's log of this server ("": not counted)
  int64_t start_timeout_s = 600;
  int64_t request_timeout_s = 3600;
  bool warmup = true;      // one short completion after each start
};

// One short request that shares nothing with any trace, so that first-use costs (graph
// allocation, threads) are not charged to the first measured request. Failures are logged.
void WarmUp(Endpoint& ep, const std::string& model);

// Starts server_cmd (when set) and warms it up; the bench's handle on a server for one run.
class ServerUnderTest {
 public:
  explicit ServerUnderTest(const ServerOptions& options);
  Status Start();
  // Stops and starts the launched server; OK and nothing done when the bench did not launch it.
  Status Restart();
  void Stop();
  bool launched() const { return process_.has_value(); }
  Endpoint& endpoint() { return ep_; }
  const ServerOptions& options() const { return options_; }

 private:
  ServerOptions options_;
  Endpoint ep_;
  std::optional<ServerProcess> process_;
};

}  // namespace prefixd::bench
