// The agent APIs, translated at the edge to and from chat completions:
//   POST /v1/responses              OpenAI Responses API   (api_responses.h)
//   POST /v1/messages               Anthropic Messages API (api_messages.h)
//   POST /v1/messages/count_tokens  {"input_tokens": n} for a Messages request
// A request is translated into a chat-completions body and run by the chat path
// (HandleChatVia), so validation, the cache, streaming and logging are the chat path's own.
#include <nlohmann/json.hpp>

#include "server/api_messages.h"
#include "server/api_responses.h"
#include "server/http_io.h"
#include "server/routes.h"

namespace prefixd::server {
namespace {

void HandleResponses(const RouteContext& ctx, const ApiAdapter& api, const httplib::Request& req,
                     httplib::Response& res) {
  std::string chat_body;
  if (auto e = ResponsesToChat(req.body, &chat_body)) {
    SendErrorBody(res, *e, api.ErrorBody(*e));
    return;
  }
  HandleChatVia(ctx, api, chat_body, req, res);
}

void HandleMessages(const RouteContext& ctx, const ApiAdapter& api, const httplib::Request& req,
                    httplib::Response& res) {
  std::string chat_body;
  if (auto e = MessagesToChat(req.body, MessagesCall::kCreate, &chat_body)) {
    SendErrorBody(res, *e, api.ErrorBody(*e));
    return;
  }
  HandleChatVia(ctx, api, chat_body, req, res);
}

void HandleCountTokens(const RouteContext& ctx, const httplib::Request& req,
                       httplib::Response& res) {
  std::string chat_body;
  int64_t n_tokens = 0;
  auto e = MessagesToChat(req.body, MessagesCall::kCountTokens, &chat_body);
  if (!e) e = CountChatPromptTokens(ctx, chat_body, ctx.TenantOf(req).salt, &n_tokens);
  if (e) {
    SendErrorBody(res, *e, AnthropicErrorBody(*e));
    return;
  }
  SendJson(res, nlohmann::json{{"input_tokens", n_tokens}}.dump());
}

}  // namespace

void RegisterAgentRoutes(httplib::Server& http, const RouteContext& ctx) {
  // The adapters are stateless and live as long as the process.
  static const std::unique_ptr<ApiAdapter> responses = NewResponsesAdapter();
  static const std::unique_ptr<ApiAdapter> messages = NewMessagesAdapter();
  http.Post("/v1/responses", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                  httplib::Response& res) {
    HandleResponses(ctx, *responses, req, res);
  }));
  http.Post("/v1/messages", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                 httplib::Response& res) {
    HandleMessages(ctx, *messages, req, res);
  }));
  http.Post("/v1/messages/count_tokens",
            Admitted(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
              HandleCountTokens(ctx, req, res);
            }));
}

}  // namespace prefixd::server
