// CompletionRun: one Backend::Complete() call on a thread of its own, with its text pieces
// handed over to the HTTP thread that serves the request.
//
// Why a thread: Complete() blocks, and on_piece runs on the engine's scheduler thread, which
// must never wait on a slow client. on_piece only appends to a buffer here; the HTTP thread
// takes the buffered text with Next(), writes it, and watches the client. Cancel() makes the
// next on_piece return false, which the engine turns into finish_reason "cancelled" and a
// freed slot.
//
// Thread-safety: Next(), Cancel() and the accessors are for the one HTTP thread that owns the
// run; on_piece is the only thing the engine thread touches. The destructor cancels an
// unfinished run and joins its thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/backend.h"

namespace prefixd::server {

class CompletionRun {
 public:
  // Starts backend.Complete(request); request.on_piece is replaced by the run's own.
  // `stop_all` (may be null) cancels the run when it becomes true (server shutdown).
  // REQUIRES: backend and stop_all outlive the run.
  CompletionRun(Backend& backend, CompletionRequest request, const std::atomic<bool>* stop_all);
  ~CompletionRun();
  CompletionRun(const CompletionRun&) = delete;
  CompletionRun& operator=(const CompletionRun&) = delete;

  enum class Event { kText, kFinished, kTimeout };
  // Waits up to `timeout` for text or the end of the run. kText moves the text produced so far
  // into *text; kFinished means the run is over and every piece was taken before.
  Event Next(std::chrono::milliseconds timeout, std::string* text);

  void Cancel() { cancel_ = true; }
  bool cancelled() const { return cancel_; }
  // REQUIRES: Next() returned kFinished.
  Result<CompletionResult>& result() { return *result_; }

 private:
  bool OnPiece(const std::string& piece);

  std::atomic<bool> cancel_{false};
  const std::atomic<bool>* stop_all_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;               // guarded by mu_
  bool finished_ = false;             // guarded by mu_
  std::optional<Result<CompletionResult>> result_;  // set under mu_ before finished_
  std::thread thread_;
};

}  // namespace prefixd::server
