// Flight: one completion from the moment it is handed to the engine to its log line.
//
// It holds the engine's running Completion (engine/completion.h) and waits on it on the
// handler's own thread, watching the client's connection between waits (a client that went
// away, or a server that is stopping, cancels the run, which frees its slot at the engine's
// next step), measures time to first text, and writes the request's log line and completion
// metrics exactly once — at the latest when it is destroyed.
//
// Thread-safety: used by one thread at a time (the handler, then the stream writer).
#pragma once

#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "engine/completion.h"
#include "server/backend.h"
#include "server/recent_requests.h"
#include "server/response_json.h"
#include "server/session_key.h"
#include "server/routes.h"

namespace prefixd::server {

class Flight {
 public:
  // Starts the run (Backend::Start; a refusal or an exception there is the run's result).
  // `meta` names the response; `route` labels logs.
  Flight(const RouteContext& ctx, const httplib::Request& req, ResponseMeta meta,
         std::string route, std::string tenant_label, CompletionRequest request, bool stream);
  ~Flight();
  Flight(const Flight&) = delete;
  Flight& operator=(const Flight&) = delete;

  // Waits for text (kText, moved into *text) or the end (kFinished), cancelling the run when
  // the client goes away meanwhile. Never returns kTimeout.
  using Event = engine::Completion::Event;
  Event Wait(std::string* text);
  // Cancels the run (the client is gone) and waits for it to end.
  void Abandon();
  // Waits for the end, discarding text.
  void Drain();

  // REQUIRES: Wait() returned kFinished (or Drain()/Abandon() returned).
  Result<CompletionResult>& result() { return run_->result(); }
  bool cancelled() const { return run_->cancelled(); }
  const ResponseMeta& meta() const { return meta_; }

  // The log line's `images` field: what the prompt's images became ("stand-in; n=2").
  void NoteImages(std::string images) { images_ = std::move(images); }

  // Writes the log line and the metrics, and adds the request to ctx.recent. `status` is the HTTP status sent (200 for a stream
  // whose headers went out). Only the first call counts.
  void Log(int status);

 private:
  const RouteContext& ctx_;
  ResponseMeta meta_;
  std::string route_;
  std::string tenant_label_;
  std::string tenant_salt_;  // CompletionRequest::tenant_salt: whose counters and records
  SessionKey session_;  // what the request says of its session (session_key.h)
  bool stream_;
  std::string images_;  // NoteImages(); "" when the request had none
  std::vector<Token> prompt_tokens_;  // kept for the divergence context in the log
  engine::PrepareTimes prepare_times_;  // the prompt's preparation, for the log
  double prepare_ms_ = 0;              // from the request's start to the run's start
  std::function<bool()> connection_closed_;  // httplib's check on the request's socket
  // What RecentRequests keeps of this request (after Log's line is built).
  RequestRecord Record(int status, bool cancelled, double total_s) const;
  // Cancels the run when the client is gone or the server stops (at most every poll interval).
  void CheckClient();

  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_check_;
  double ttft_seconds_ = -1;
  bool finished_ = false;
  bool logged_ = false;
  std::shared_ptr<engine::Completion> run_;
};

}  // namespace prefixd::server
