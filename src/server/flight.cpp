#include "server/flight.h"

#include "server/http_io.h"
#include "server/request_log.h"

namespace prefixd::server {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

}  // namespace

Flight::Flight(const RouteContext& ctx, const httplib::Request& req, ResponseMeta meta,
               std::string route, std::string tenant_label, CompletionRequest request,
               bool stream)
    : ctx_(ctx),
      meta_(std::move(meta)),
      route_(std::move(route)),
      tenant_label_(std::move(tenant_label)),
      stream_(stream),
      prompt_tokens_(request.prompt.tokens),
      connection_closed_(req.is_connection_closed),
      start_(RequestStart()) {
  run_ = std::make_unique<CompletionRun>(*ctx.backend, std::move(request), ctx.stopping);
}

Flight::~Flight() {
  if (!finished_) Abandon();
  Log(200);
}

CompletionRun::Event Flight::Wait(std::string* text) {
  for (;;) {
    CompletionRun::Event ev = run_->Next(kPollInterval, text);
    if (ev == CompletionRun::Event::kText && ttft_seconds_ < 0) {
      ttft_seconds_ =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    if (ev == CompletionRun::Event::kFinished) finished_ = true;
    CheckClient();
    if (ev != CompletionRun::Event::kTimeout) return ev;
  }
}

void Flight::CheckClient() {
  auto now = std::chrono::steady_clock::now();
  if (run_->cancelled() || finished_ || now - last_check_ < kPollInterval) return;
  last_check_ = now;
  bool stopping = ctx_.stopping != nullptr && *ctx_.stopping;
  if (stopping || connection_closed_()) run_->Cancel();
}

void Flight::Abandon() {
  run_->Cancel();
  Drain();
}

void Flight::Drain() {
  std::string text;
  while (Wait(&text) != CompletionRun::Event::kFinished) text.clear();
}

void Flight::Log(int status) {
  if (logged_ || !finished_) return;
  logged_ = true;
  double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  LogLine line("request");
  line.Add("id", meta_.id).Add("route", route_).Add("status", (long long)status);
  line.Add("tenant", tenant_label_).Add("stream", (long long)(stream_ ? 1 : 0));
  const Result<CompletionResult>& r = run_->result();
  bool cancelled = run_->cancelled();
  if (r.ok()) {
    line.AddCompletion(*r);
    cancelled = cancelled || r->finish_reason == engine::FinishReason::kCancelled;
    if (r->cache.diverged_at > 0) {  // 0: nothing shared at all, not a changed prefix
      line.AddDivergence(*ctx_.backend, prompt_tokens_, r->cache.diverged_at);
    }
    ctx_.metrics->RecordCompletion(*r, ttft_seconds_);
  } else {
    line.Add("error", r.status().ToString());
  }
  if (cancelled) {
    line.Add("cancelled", 1LL);
    ctx_.metrics->RecordCancelled();
  }
  if (ttft_seconds_ >= 0) line.Add("ttft_ms", ttft_seconds_ * 1000);
  line.Add("total_ms", total_s * 1000);
  WriteLogLine(line);
}

}  // namespace prefixd::server
