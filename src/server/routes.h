// The HTTP routes, registered on a cpp-httplib server. Each Register* function adds one group:
//   completions: POST /v1/chat/completions, POST /v1/completions      (routes_completion.cpp)
//   info:        GET /v1/models[/{id}], GET /health, GET /metrics,
//                POST /tokenize, POST /detokenize, POST /apply-template (routes_info.cpp)
//   cache admin: GET /v1/cache, POST /v1/cache/warm, POST /v1/cache/clear (routes_cache.cpp)
//   web page:    GET /, GET /assets/{file}, GET /v1/cache/stats, GET /v1/cache/entries,
//                DELETE /v1/cache/entries/{domain}/{root}, GET /v1/requests/recent
//                (routes_web.cpp; / and /assets/* need no key: they hold no data)
//   agent APIs:  POST /v1/responses, POST /v1/messages, POST /v1/messages/count_tokens
//                (routes_agent.cpp: translated to and from chat completions)
//   render:      POST /v1/chat/completions/render, POST /v1/completions/render, GET /version
//                (routes_render.cpp: vLLM's shapes, for the routers that tokenize through them)
// docs/http-api.md describes every shape. Authentication and rights are checked before routing
// (front_door.h): a route reads its tenant with TenantOf(), and admin routes (IsAdminRoute) are
// only reached with an admin key, or when keys are off.
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "server/auth.h"
#include "server/backend.h"
#include "server/metrics.h"
#include "server/recent_requests.h"
#include "server/admission.h"
#include "server/request_parse.h"
#include "server/response_json.h"

namespace prefixd::server {

// What the routes share. Everything outlives the httplib server.
struct RouteContext {
  Backend* backend = nullptr;
  const TenantAuth* auth = nullptr;
  ServerMetrics* metrics = nullptr;
  RecentRequests* recent = nullptr;        // the last completions (GET /v1/requests/recent)
  std::string model_id;                    // what /v1/models lists and requests may name
  int n_predict = 0;                       // ServerOptions::n_predict
  std::vector<std::string> aliases;        // ServerOptions::aliases
  std::vector<std::pair<int32_t, float>> logit_bias;  // ServerOptions::logit_bias
  bool log_prompts = false;                // ServerOptions::log_prompts
  std::function<KvEventTotals()> kv_event_totals;  // ServerOptions::kv_event_totals
  ImageOptions images;                     // ServerOptions::images
  Admission* admission = nullptr;          // the places of work routes (Admitted)
  const std::atomic<bool>* stopping = nullptr;  // true once the server is shutting down

  // The tenant of an authenticated request. REQUIRES: the pre-routing check let it in.
  Tenant TenantOf(const httplib::Request& req) const;
  // The limits request parsing checks against (context size, vocabulary).
  ParseLimits Limits() const;
  // nullopt when `model` is "" or served here; else 404 model_not_found.
  std::optional<ApiError> CheckModel(const std::string& model) const;
};

// True for the routes only admin keys may call: POST /v1/cache/clear (drops every tenant's
// entries), DELETE /v1/cache/entries/{domain}/{root} (evicts one prefix tree). Any route that
// evicts or drops cache entries belongs here.
bool IsAdminRoute(const std::string& method, const std::string& path);
// True for the paths served without a key even when keys are on: GET /health, and the web
// page and its static assets (/, /assets/*), which hold no data.
bool IsOpenRoute(const std::string& path);

// A route that does work (runs the model, tokenizes, renders) takes an admission place once its
// body has been read, before any parsing, or answers 503 (admission.h): a client that is slow
// to send its body holds a connection thread, never a slot or a queue place. The place is
// freed when the response is written (the server's post-routing handler).
httplib::Server::Handler Admitted(const RouteContext& ctx, httplib::Server::Handler handler);

class ApiAdapter;

void RegisterCompletionRoutes(httplib::Server& http, const RouteContext& ctx);
void RegisterAgentRoutes(httplib::Server& http, const RouteContext& ctx);

// Runs `chat_body` (a /v1/chat/completions body) exactly as POST /v1/chat/completions does and
// answers through `api`: its final body, its stream events, its error bodies.
void HandleChatVia(const RouteContext& ctx, const ApiAdapter& api, const std::string& chat_body,
                   const httplib::Request& req, httplib::Response& res);
// Checks `chat_body` as a chat completion would be and counts the tokens of its rendered
// prompt (with the generation prompt) into *n_tokens; else the error to answer. `scope`: the
// tenant's salt (ChatRenderOptions::memo_scope).
std::optional<ApiError> CountChatPromptTokens(const RouteContext& ctx,
                                              const std::string& chat_body,
                                              const std::string& scope, int64_t* n_tokens);
// A completion body as POST /v1/chat/completions (kChat) or /v1/completions (kText) would
// evaluate it, without running it.
struct RenderedPrompt {
  std::vector<Token> tokens;  // exactly the prompt tokens the completion evaluates
  GenerationParams params;    // as the completion runs them: max_tokens clamped to the room left
};
// Prepares `body` through the completion routes' own steps (parse, chat template or tokenizer,
// model check, context fit) into *out; else the error that completion would answer. A chat
// whose images the model reads is a 400: their rows are embeddings, which no token id names.
// `scope`: the tenant's salt (ChatRenderOptions::memo_scope).
std::optional<ApiError> RenderCompletionPrompt(const RouteContext& ctx, Endpoint ep,
                                               const std::string& body, const std::string& scope,
                                               RenderedPrompt* out);
void RegisterRenderRoutes(httplib::Server& http, const RouteContext& ctx);
void RegisterInfoRoutes(httplib::Server& http, const RouteContext& ctx);
void RegisterCacheRoutes(httplib::Server& http, const RouteContext& ctx);
void RegisterWebRoutes(httplib::Server& http, const RouteContext& ctx);

}  // namespace prefixd::server
