// GET /v1/models[/{id}], GET /health, GET /metrics, POST /tokenize, POST /detokenize,
// POST /apply-template, and the RouteContext helpers every route uses.
#include <fnmatch.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "server/http_io.h"
#include "server/model_window.h"
#include "server/routes.h"
#include "server/server.h"

namespace prefixd::server {

using json = nlohmann::json;

Tenant RouteContext::TenantOf(const httplib::Request& req) const {
  auto t = auth->Authenticate(req.get_header_value("Authorization"),
                              req.get_header_value("x-api-key"));
  return t ? *t : Tenant{"", "-"};
}

ParseLimits RouteContext::Limits() const {
  ParseLimits l;
  l.max_tokens_limit = int(backend->n_ctx_per_slot());
  l.vocab_hint = backend->n_vocab();
  l.images = images;
  return l;
}

httplib::Server::Handler Admitted(const RouteContext& ctx, httplib::Server::Handler handler) {
  return [&ctx, handler = std::move(handler)](const httplib::Request& req,
                                              httplib::Response& res) {
    if (ctx.admission != nullptr && !ctx.admission->Admit()) {
      return SendError(res, {ErrorKind::kOverloaded,
                             "the server is busy: " + std::to_string(ctx.admission->limit()) +
                                 " requests are being worked on or waiting; retry later",
                             "", "server_overloaded"});
    }
    handler(req, res);
  };
}

bool IsModelPattern(const std::string& alias) {
  return alias.find_first_of("*?[") != std::string::npos;
}

std::optional<ApiError> RouteContext::CheckModel(const std::string& model) const {
  if (model.empty() || model == model_id) return std::nullopt;
  for (const std::string& a : aliases) {
    const bool match = IsModelPattern(a) ? fnmatch(a.c_str(), model.c_str(), 0) == 0 : a == model;
    if (match) return std::nullopt;
  }
  return ApiError{ErrorKind::kModelNotFound,
                  "The model '" + model + "' does not exist; this server serves '" + model_id +
                      "'",
                  "model", "model_not_found"};
}

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// RFC 3339, as the Anthropic Models API's created_at.
std::string Rfc3339(int64_t t) {
  char buf[32];
  std::tm tm{};
  const std::time_t tt = std::time_t(t);
  gmtime_r(&tt, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The model's window under every name the clients read it by (ModelWindowOf): OpenAI's list
// entry, the Anthropic Models API's fields (Claude Code's gateway discovery), and the names
// vLLM, LM Studio and OpenRouter use.
json ModelJson(const RouteContext& ctx, const std::string& id, int64_t created) {
  const ModelWindow w = ModelWindowOf(ctx.backend->n_ctx_per_slot(), ctx.n_predict);
  return {{"id", id},
          {"object", "model"},
          {"created", created},
          {"owned_by", "prefixd"},
          {"root", ctx.model_id},  // vLLM's: the model an entry serves (SMG's model_path)
          {"type", "model"},
          {"display_name", id},
          {"created_at", Rfc3339(created)},
          {"max_input_tokens", w.context},
          {"max_tokens", w.max_output},
          {"context_window", w.context},
          {"context_length", w.context},
          {"max_model_len", w.context},
          {"input_modalities", ctx.images.mode == ImageMode::kRead
                                   ? json::array({"text", "image"})
                                   : json::array({"text"})},
          {"meta", {{"n_ctx_per_slot", ctx.backend->n_ctx_per_slot()},
                    {"n_vocab", ctx.backend->n_vocab()}}}};
}

void Tokenize(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  TokenizeRequest t;
  if (auto e = ParseTokenizeRequest(req.body, &t)) return SendError(res, *e);
  // Exactly the tokens /v1/completions would evaluate for this text.
  auto prompt = ctx.backend->PrepareText(t.content, ctx.TenantOf(req).salt);
  if (!prompt.ok()) return SendError(res, ApiErrorFromStatus(prompt.status()));
  if (t.with_pieces && prompt->tokens.size() > kMaxTokenizePieces) {
    return SendError(res, ApiError::Invalid(
                              "the text is " + std::to_string(prompt->tokens.size()) +
                                  " tokens; with_pieces answers at most " +
                                  std::to_string(kMaxTokenizePieces) +
                                  " (ask without pieces, or in parts)",
                              "with_pieces"));
  }
  json tokens = json::array();
  for (Token id : prompt->tokens) {
    if (t.with_pieces) {
      tokens.push_back({{"id", id}, {"piece", ctx.backend->Detokenize({id})}});
    } else {
      tokens.push_back(id);
    }
  }
  SendJson(res, Dump({{"tokens", tokens}}));
}

void Detokenize(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  std::vector<Token> tokens;
  if (auto e = ParseDetokenizeRequest(req.body, &tokens, ctx.Limits())) {
    return SendError(res, *e);
  }
  SendJson(res, Dump({{"content", ctx.backend->Detokenize(tokens)}}));
}

// llama-server's /apply-template: {"messages", "tools"?} -> {"prompt": the rendered chat text}.
// prefixd adds "tokens": the exact ids /v1/chat/completions evaluates for this chat (the text
// is their detokenization, special tokens such as BOS included), so a client such as
// `prefixd bench` needs no second round trip and no guess about BOS.
void ApplyTemplate(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  WarmRequest w;
  if (auto e = ParseWarmRequest(req.body, &w, ctx.images)) return SendError(res, *e);
  if (!w.is_chat) return SendError(res, ApiError::Invalid("'messages' is required", "messages"));
  w.chat.render.memo_scope = ctx.TenantOf(req).salt;
  auto prompt = ctx.backend->PrepareChat(w.chat.messages_json, w.chat.render);
  if (!prompt.ok()) return SendError(res, ApiErrorFromStatus(prompt.status()));
  SendJson(res, Dump({{"prompt", ctx.backend->Detokenize(prompt->tokens)},
                      {"tokens", prompt->tokens}}));
}

void Health(const RouteContext& ctx, httplib::Response& res) {
  engine::EngineStats s = ctx.backend->GetStats();
  if (!s.backend_lost.empty()) {  // nothing can be computed: a load balancer moves on
    SendJson(res, Dump({{"status", "backend_lost"}, {"message", s.backend_lost}}));
    res.status = 503;
    return;
  }
  SendJson(res, Dump({{"status", "ok"},
                      {"slots_busy", s.slots_busy},
                      {"queue_depth", s.queue_depth}}));
}

}  // namespace

void RegisterInfoRoutes(httplib::Server& http, const RouteContext& ctx) {
  int64_t created = int64_t(std::time(nullptr));
  // One entry per name a client can list and pick; the patterns (`claude-*`) are not names,
  // so they show in the model's own entry, with every alias.
  http.Get("/v1/models", [&ctx, created](const httplib::Request&, httplib::Response& res) {
    json primary = ModelJson(ctx, ctx.model_id, created);
    primary["meta"]["aliases"] = ctx.aliases;
    json data = json::array({std::move(primary)});
    for (const std::string& a : ctx.aliases) {
      if (!IsModelPattern(a)) data.push_back(ModelJson(ctx, a, created));
    }
    SendJson(res, Dump({{"object", "list"}, {"data", std::move(data)}}));
  });
  http.Get("/v1/models/(.+)", [&ctx, created](const httplib::Request& req,
                                              httplib::Response& res) {
    std::string id = req.matches[1];
    if (auto e = ctx.CheckModel(id.empty() ? "-" : id)) return SendError(res, *e);
    SendJson(res, Dump(ModelJson(ctx, id, created)));
  });
  http.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    Health(ctx, res);
  });
  http.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    const ServedModel model{ctx.model_id, ctx.backend->n_ctx_per_slot()};
    std::string page = ctx.metrics->Render(ctx.backend->GetStats(), model);
    if (ctx.kv_event_totals) RenderKvEvents(ctx.kv_event_totals(), &page);
    res.set_content(page, "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Post("/tokenize", Admitted(ctx, [&ctx](const httplib::Request& req,
                                              httplib::Response& res) {
    Tokenize(ctx, req, res);
  }));
  http.Post("/detokenize", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                httplib::Response& res) {
    Detokenize(ctx, req, res);
  }));
  http.Post("/apply-template", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                    httplib::Response& res) {
    ApplyTemplate(ctx, req, res);
  }));
}

}  // namespace prefixd::server
