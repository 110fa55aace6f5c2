#include "server/completion_run.h"

namespace prefixd::server {

CompletionRun::CompletionRun(Backend& backend, CompletionRequest request,
                             const std::atomic<bool>* stop_all)
    : stop_all_(stop_all) {
  request.on_piece = [this](const std::string& piece) { return OnPiece(piece); };
  request.is_cancelled = [this] { return cancel_ || (stop_all_ && *stop_all_); };
  thread_ = std::thread([this, &backend, req = std::move(request)]() mutable {
    // This request's failure is its own: whatever escapes the backend (a template, a parser)
    // answers this request and leaves the process running.
    Result<CompletionResult> r = Status::Internal("unknown exception");
    try {
      r = backend.Complete(std::move(req));
    } catch (const std::exception& e) {
      r = Status::Internal(std::string("internal error: ") + e.what());
    } catch (...) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    result_.emplace(std::move(r));
    finished_ = true;
    cv_.notify_all();
  });
}

CompletionRun::~CompletionRun() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

bool CompletionRun::OnPiece(const std::string& piece) {
  if (cancel_ || (stop_all_ && *stop_all_)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!piece.empty()) {
    pending_ += piece;
    cv_.notify_all();
  }
  return true;
}

CompletionRun::Event CompletionRun::Next(std::chrono::milliseconds timeout, std::string* text) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || finished_; });
  if (!pending_.empty()) {
    *text = std::move(pending_);
    pending_.clear();
    return Event::kText;
  }
  return finished_ ? Event::kFinished : Event::kTimeout;
}

}  // namespace prefixd::server
