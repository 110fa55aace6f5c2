#include "engine/completion.h"

namespace prefixd::engine {

Completion::Event Completion::Next(std::chrono::milliseconds timeout, std::string* text) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (pending_.empty() && !finished_ && cv_.WaitUntil(lock, deadline)) {
  }
  if (!pending_.empty()) {
    *text = std::move(pending_);
    pending_.clear();
    return Event::kText;
  }
  return finished_ ? Event::kFinished : Event::kTimeout;
}

bool Completion::Put(std::string_view piece) {
  if (cancelled_) return false;
  if (piece.empty()) return true;
  MutexLock lock(&mu_);
  pending_.append(piece);
  cv_.notify_all();
  return true;
}

void Completion::Finish(Result<CompletionResult> result) {
  MutexLock lock(&mu_);
  if (finished_) return;
  result_.emplace(std::move(result));
  finished_ = true;
  cv_.notify_all();
}

Result<CompletionResult> Drain(Completion& completion, const PieceFn& on_piece) {
  // A long wait: the engine wakes Next() with every piece and at the end.
  constexpr auto kWait = std::chrono::seconds(1);
  std::string text;
  for (;;) {
    Completion::Event ev = completion.Next(kWait, &text);
    if (ev == Completion::Event::kFinished) return std::move(completion.result());
    if (ev != Completion::Event::kText || !on_piece || completion.cancelled()) continue;
    bool go_on = false;
    try {
      go_on = on_piece(text);
    } catch (...) {
      completion.Cancel();  // the owner's failure: the engine frees the slot, the owner rethrows
      throw;
    }
    if (!go_on) completion.Cancel();
  }
}

}  // namespace prefixd::engine
