// Cache admin: GET /v1/cache (the engine's counters as JSON), POST /v1/cache/warm (prefill a
// prompt so that later requests sharing its prefix restore it; runs under the caller's tenant
// salt and generates one token), POST /v1/cache/clear (drops every cached entry, all tenants;
// an admin route).
#include <nlohmann/json.hpp>

#include "server/http_io.h"
#include "server/request_log.h"
#include "server/routes.h"

namespace prefixd::server {

using json = nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json StatsJson(const engine::EngineStats& s) {
  return {{"cache", s.cache_on ? engine::StateModeName(s.state_mode) : "off"},
          {"chunking_invariant", s.chunking_invariant},
          {"requests", s.requests},
          {"prompt_tokens", s.prompt_tokens},
          {"cached_tokens", s.cached_tokens},
          {"evaluated_tokens", s.evaluated_tokens},
          {"generated_tokens", s.generated_tokens},
          {"hits", {{"slot", s.hits_slot}, {"ram", s.hits_ram}, {"disk", s.hits_disk}}},
          {"restored_bytes", s.restored_bytes},
          {"misses", s.misses},
          {"misses_by_reason", engine::CountsByName(s.misses_by_reason, engine::CacheMissName)},
          {"bytes_by_tier", engine::CountsByName(s.bytes_by_tier, engine::CacheTierName)},
          {"evictions_by_tier", engine::CountsByName(s.evictions_by_tier, engine::CacheTierName)},
          {"slots_busy", s.slots_busy},
          {"queue_depth", s.queue_depth}};
}

std::optional<ApiError> WarmPrompt(const RouteContext& ctx, const WarmRequest& w, Prompt* out) {
  auto prompt = w.is_chat ? ctx.backend->PrepareChat(w.chat.messages_json, w.chat.render)
                          : ctx.backend->PrepareText(w.prompt);
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
  if (auto e = ParseWarmRequest(req.body, &w)) return SendError(res, *e);
  CompletionRequest creq;
  if (auto e = WarmPrompt(ctx, w, &creq.prompt)) return SendError(res, *e);
  creq.max_tokens = 1;
  creq.tenant_salt = ctx.TenantOf(req).salt;
  auto r = ctx.backend->Complete(std::move(creq));
  if (!r.ok()) return SendError(res, ApiErrorFromStatus(r.status()));
  SendJson(res, Dump({{"prompt_tokens", r->usage.prompt_tokens},
                      {"cached_tokens", r->usage.cached_tokens},
                      {"evaluated_tokens", r->usage.evaluated_tokens},
                      {"tier", engine::CacheTierName(r->cache.tier)},
                      {"prefill_ms", r->usage.prefill_ms}}));
}

}  // namespace

bool IsAdminRoute(const std::string& method, const std::string& path) {
  return method == "POST" && path == "/v1/cache/clear";
}

void RegisterCacheRoutes(httplib::Server& http, const RouteContext& ctx) {
  http.Get("/v1/cache", [&ctx](const httplib::Request&, httplib::Response& res) {
    SendJson(res, Dump(StatsJson(ctx.backend->GetStats())));
  });
  http.Post("/v1/cache/warm", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Warm(ctx, req, res);
  });
  http.Post("/v1/cache/clear", [&ctx](const httplib::Request&, httplib::Response& res) {
    Status st = ctx.backend->ClearCache();
    if (!st.ok()) return SendError(res, ApiErrorFromStatus(st));
    WriteLogLine(LogLine("cache_cleared"));
    SendJson(res, R"({"cleared":true})");
  });
}

}  // namespace prefixd::server
