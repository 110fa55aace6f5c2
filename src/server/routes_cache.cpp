// Cache admin: GET /v1/cache (the cache's counters as JSON: the engine's, every tenant's, for
// an admin or with keys off; a tenant's own requests' for a tenant), POST /v1/cache/warm
// (prefill a prompt so that later requests sharing its prefix restore it; runs under the
// caller's tenant salt and generates one token), POST /v1/cache/clear (drops every cached
// entry, all tenants; an admin route). Also which routes are admin routes (IsAdminRoute).
#include <nlohmann/json.hpp>

#include "server/cache_json.h"
#include "server/http_io.h"
#include "server/request_log.h"
#include "server/routes.h"

namespace prefixd::server {

using json = nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// `scope`: the tenant's salt (ChatRenderOptions::memo_scope).
std::optional<ApiError> WarmPrompt(const RouteContext& ctx, WarmRequest w,
                                   const std::string& scope, Prompt* out) {
  w.chat.render.memo_scope = scope;
  auto prompt = w.is_chat ? ctx.backend->PrepareChat(w.chat.messages_json, w.chat.render)
                          : ctx.backend->PrepareText(w.prompt, scope);
  if (!prompt.ok()) return ApiErrorFromStatus(prompt.status());
  if (prompt->tokens.empty()) return ApiError::Invalid("the prompt is empty", "prompt");
  if (prompt->tokens.size() >= ctx.backend->n_ctx_per_slot()) {
    return ApiError{ErrorKind::kContextExceeded,
                    "the prompt has " + std::to_string(prompt->tokens.size()) +
                        " tokens; the context holds " +
                        std::to_string(ctx.backend->n_ctx_per_slot()),
                    "prompt", "context_length_exceeded"};
  }
  *out = std::move(*prompt);
  return std::nullopt;
}

void Warm(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  WarmRequest w;
  if (auto e = ParseWarmRequest(req.body, &w, ctx.images)) return SendError(res, *e);
  CompletionRequest creq;
  creq.tenant_salt = ctx.TenantOf(req).salt;
  if (auto e = WarmPrompt(ctx, std::move(w), creq.tenant_salt, &creq.prompt)) {
    return SendError(res, *e);
  }
  creq.max_tokens = 1;
  const std::string salt = creq.tenant_salt;
  auto r = ctx.backend->Complete(std::move(creq));
  if (!r.ok()) return SendError(res, ApiErrorFromStatus(r.status()));
  ctx.metrics->RecordTenantUsage(salt, *r);  // the engine counts a warm as a request too
  SendJson(res, Dump({{"prompt_tokens", r->usage.prompt_tokens},
                      {"cached_tokens", r->usage.cached_tokens},
                      {"evaluated_tokens", r->usage.evaluated_tokens},
                      {"tier", cache::TierName(r->cache.tier)},
                      {"prefill_ms", r->usage.prefill_ms}}));
}

// An admin (or the one local user with keys off) sees every tenant's counters; a tenant its own.
void Counters(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Tenant t = ctx.TenantOf(req);
  const engine::EngineStats s = ctx.backend->GetStats();
  SendJson(res, Dump(t.admin ? CacheCountersJson(s)
                             : TenantCacheCountersJson(s, ctx.metrics->TenantUsage(t.salt))));
}

}  // namespace

bool IsAdminRoute(const std::string& method, const std::string& path) {
  if (method == "POST" && path == "/v1/cache/clear") return true;
  // Every tenant's traffic in one page: Prometheus scrapes it with an admin key.
  if (path == "/metrics") return true;
  return method == "DELETE" && path.rfind("/v1/cache/entries/", 0) == 0;
}

void RegisterCacheRoutes(httplib::Server& http, const RouteContext& ctx) {
  http.Get("/v1/cache", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Counters(ctx, req, res);
  });
  http.Post("/v1/cache/warm", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                   httplib::Response& res) {
    Warm(ctx, req, res);
  }));
  http.Post("/v1/cache/clear", [&ctx](const httplib::Request&, httplib::Response& res) {
    Status st = ctx.backend->ClearCache();
    if (!st.ok()) return SendError(res, ApiErrorFromStatus(st));
    WriteLogLine(LogLine("cache_cleared"));
    SendJson(res, R"({"cleared":true})");
  });
}

}  // namespace prefixd::server
