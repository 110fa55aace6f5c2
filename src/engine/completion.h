// Completion: one running request, from Engine::Start to its result.
//
// The engine's scheduler thread writes the request's text pieces and its end into it; the
// request's owner reads them with Next() on its own thread and may Cancel() it at any time.
// No thread is started for a request and no one waits on anyone: the scheduler only appends
// (it never blocks on a slow client), the owner waits for text with a timeout of its choosing
// (an HTTP handler checks its client between waits).
//
// Thread-safety: one producer (the engine) and one consumer (the owner); every method may be
// called from either thread. Both hold it (std::shared_ptr), so either may let go first; an owner
// that stops reading should Cancel(), which frees the slot at the engine's next step.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "engine/request.h"
#include "util/mutex.h"
#include "util/status.h"

namespace prefixd::engine {

class Completion {
 public:
  // --- The owner's side.
  enum class Event { kText, kFinished, kTimeout };
  // Waits up to `timeout` for text or the end. kText moves the text produced since the last
  // call into *text; kFinished: the run is over and every piece was taken before.
  Event Next(std::chrono::milliseconds timeout, std::string* text);
  // The request ends as FinishReason::kCancelled at the engine's next step (prefill chunk or
  // token); pieces produced after this are dropped.
  void Cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Prompt tokens in the slot's sequence so far (restored + evaluated); 0 while queued.
  int32_t prompt_progress() const { return progress_; }
  // REQUIRES: Next() returned kFinished.
  Result<CompletionResult>& result() PREFIXD_EXCLUDES(mu_) {
    MutexLock lock(&mu_);  // written once, before finished_: the reference stays valid
    return *result_;
  }

  // --- The engine's side.
  // Appends a piece for the owner. False when the request was cancelled (the piece dropped).
  bool Put(std::string_view piece);
  void NoteProgress(int32_t tokens) { progress_ = tokens; }
  // Ends the run with its result. Only the first call counts.
  void Finish(Result<CompletionResult> result);

 private:
  std::atomic<bool> cancelled_{false};
  std::atomic<int32_t> progress_{0};
  Mutex mu_;
  CondVar cv_;
  std::string pending_ PREFIXD_GUARDED_BY(mu_);
  bool finished_ PREFIXD_GUARDED_BY(mu_) = false;
  std::optional<Result<CompletionResult>> result_ PREFIXD_GUARDED_BY(mu_);  // set with finished_
};

// Called with each piece of text; false cancels the request.
using PieceFn = std::function<bool(const std::string& piece)>;

// Waits for the end of `completion` on the calling thread, handing each piece to `on_piece`
// (may be empty) as it arrives. A false from on_piece cancels the request and Drain still waits
// for its end (finish_reason kCancelled). If on_piece throws, the request is cancelled and the
// exception propagates to the caller.
Result<CompletionResult> Drain(Completion& completion, const PieceFn& on_piece = {});

}  // namespace prefixd::engine
