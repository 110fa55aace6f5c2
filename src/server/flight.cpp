#include "server/flight.h"

#include "server/http_io.h"
#include "server/request_log.h"

namespace prefixd::server {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// The backend's running request, or one already finished with why it could not start. This
// request's failure is its own: whatever escapes the backend (a template, a parser, a tier
// read) answers this request and leaves the process running.
std::shared_ptr<engine::Completion> StartRun(Backend& backend, CompletionRequest request) {
  Result<std::shared_ptr<engine::Completion>> started = Status::Internal("unknown exception");
  try {
    started = backend.Start(std::move(request));
  } catch (const std::exception& e) {
    started = Status::Internal(std::string("internal error: ") + e.what());
  } catch (...) {
  }
  if (started.ok()) return std::move(started).value();
  auto refused = std::make_shared<engine::Completion>();
  refused->Finish(started.status());
  return refused;
}

}  // namespace

Flight::Flight(const RouteContext& ctx, const httplib::Request& req, ResponseMeta meta,
               std::string route, std::string tenant_label, CompletionRequest request,
               bool stream)
    : ctx_(ctx),
      meta_(std::move(meta)),
      route_(std::move(route)),
      tenant_label_(std::move(tenant_label)),
      tenant_salt_(request.tenant_salt),
      session_(SessionKeyOf(req)),
      stream_(stream),
      prompt_tokens_(request.prompt.tokens),
      prepare_times_(request.prompt.times),
      connection_closed_(req.is_connection_closed),
      start_(RequestStart()) {
  prepare_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  run_ = StartRun(*ctx.backend, std::move(request));
}

Flight::~Flight() {
  if (!finished_) Abandon();
  Log(200);
}

Flight::Event Flight::Wait(std::string* text) {
  for (;;) {
    Event ev = run_->Next(kPollInterval, text);
    if (ev == Event::kText && ttft_seconds_ < 0) {
      ttft_seconds_ =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    if (ev == Event::kFinished) finished_ = true;
    CheckClient();
    if (ev != Event::kTimeout) return ev;
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
  while (Wait(&text) != Event::kFinished) text.clear();
}

void Flight::Log(int status) {
  if (logged_ || !finished_) return;
  logged_ = true;
  double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  LogLine line("request");
  line.Add("id", meta_.id).Add("route", route_).Add("status", (long long)status);
  line.Add("tenant", tenant_label_).Add("stream", (long long)(stream_ ? 1 : 0));
  if (!session_.id.empty()) line.Add("session", session_.id);
  if (!images_.empty()) line.Add("images", images_);
  ctx_.metrics->RecordSession(session_.source);
  const Result<CompletionResult>& r = run_->result();
  bool cancelled = run_->cancelled();
  if (r.ok()) {
    line.AddCompletion(*r);
    cancelled = cancelled || r->finish_reason == engine::FinishReason::kCancelled;
    if (r->cache.diverged_at > 0 && ctx_.log_prompts) {  // 0: nothing shared at all
      line.AddDivergence(*ctx_.backend, prompt_tokens_, r->cache.diverged_at);
    } else if (r->cache.diverged_at > 0) {
      line.Add("diverged_at", (long long)r->cache.diverged_at);
    }
    ctx_.metrics->RecordCompletion(*r, ttft_seconds_);
    ctx_.metrics->RecordTenantUsage(tenant_salt_, *r);
  } else {
    line.Add("error", r.status().ToString());
  }
  if (cancelled) {
    line.Add("cancelled", 1LL);
    ctx_.metrics->RecordCancelled();
  }
  line.Add("prepare_ms", prepare_ms_).Add("parse_ms", prepare_times_.parse_ms);
  line.Add("render_ms", prepare_times_.render_ms);
  line.Add("tokenize_ms", prepare_times_.tokenize_ms).Add("points_ms", prepare_times_.points_ms);
  if (prepare_times_.images_ms > 0) line.Add("images_ms", prepare_times_.images_ms);
  if (ttft_seconds_ >= 0) line.Add("ttft_ms", ttft_seconds_ * 1000);
  line.Add("total_ms", total_s * 1000);
  WriteLogLine(line);
  if (ctx_.recent != nullptr) ctx_.recent->Add(Record(status, cancelled, total_s));
}

RequestRecord Flight::Record(int status, bool cancelled, double total_s) const {
  RequestRecord rec;
  rec.time_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  rec.id = meta_.id;
  rec.route = route_;
  rec.tenant = tenant_label_;
  rec.tenant_salt = tenant_salt_;
  rec.session = session_.id;
  rec.status = status;
  rec.stream = stream_;
  rec.cancelled = cancelled;
  rec.ttft_ms = ttft_seconds_ >= 0 ? ttft_seconds_ * 1000 : -1;
  rec.total_ms = total_s * 1000;
  const Result<CompletionResult>& r = run_->result();
  if (!r.ok()) return rec;
  const engine::Usage& u = r->usage;
  rec.finish = engine::FinishReasonName(r->finish_reason);
  rec.prompt_tokens = u.prompt_tokens;
  rec.cached_tokens = u.cached_tokens;
  rec.evaluated_tokens = u.evaluated_tokens;
  rec.completion_tokens = u.completion_tokens;
  rec.draft_tokens = u.draft_tokens;
  rec.draft_accepted = u.draft_accepted;
  rec.tier = cache::TierName(r->cache.tier);
  rec.miss_reason = cache::MissReasonName(r->cache.miss);
  if (r->cache.diverged_at > 0) {
    rec.diverged_at = r->cache.diverged_at;
    if (ctx_.log_prompts) {
      rec.diverged = DivergenceText(*ctx_.backend, prompt_tokens_, r->cache.diverged_at);
    }
  }
  rec.queue_ms = u.queue_ms;
  rec.prefill_ms = u.prefill_ms;
  rec.restore_ms = u.restore_ms;
  rec.prompt_eval_ms = u.prompt_eval_ms;
  return rec;
}

}  // namespace prefixd::server
