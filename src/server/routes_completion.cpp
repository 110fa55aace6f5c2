// POST /v1/chat/completions and POST /v1/completions: parse and check the request, run it as a
// Flight, and answer in one JSON body or as a server-sent event stream. Other APIs run chat
// completions through here with an ApiAdapter that translates the answers (HandleChatVia).
//
// The response's status is decided before anything is sent: the handler waits for the first
// generated text (or the end) before committing to 200, so a full queue (503), a prompt over
// the context (400) or an engine failure still gets its proper status, streamed or not.
#include <algorithm>
#include <ctime>
#include <memory>

#include "server/api_adapter.h"
#include "server/flight.h"
#include "server/http_io.h"
#include "server/request_log.h"
#include "server/response_json.h"
#include "server/routes.h"
#include "server/sse.h"

namespace prefixd::server {
namespace {

using Event = Flight::Event;

struct Prepared {
  Prompt prompt;
  GenerationParams params;
  bool logprobs = false;
  size_t n_images = 0;  // image parts in the prompt (image_part.h), as ctx.images.mode put them
};

// Parses a chat body into *chat and takes its generation parameters into *out.
std::optional<ApiError> ParseChat(const RouteContext& ctx, const std::string& body,
                                  ChatRequest* chat, Prepared* out) {
  if (auto e = ParseChatRequest(body, ctx.Limits(), chat)) return e;
  out->params = std::move(chat->params);
  out->logprobs = chat->logprobs;
  out->n_images = chat->n_images;
  return std::nullopt;
}

// Renders a parsed chat into out->prompt. `scope`: the tenant's salt, whose memo entries the
// render and tokens are.
std::optional<ApiError> RenderChat(const RouteContext& ctx, ChatRequest& chat,
                                   const std::string& scope, Prepared* out) {
  chat.render.memo_scope = scope;
  auto prompt = ctx.backend->PrepareChat(chat.messages_json, chat.render);
  if (!prompt.ok()) {
    ApiError e = ApiErrorFromStatus(prompt.status());
    if (e.kind == ErrorKind::kInvalidRequest) e.param = "messages";
    return e;
  }
  out->prompt = std::move(*prompt);
  return std::nullopt;
}

std::optional<ApiError> PrepareChat(const RouteContext& ctx, const std::string& body,
                                    const std::string& scope, Prepared* out) {
  ChatRequest chat;
  if (auto e = ParseChat(ctx, body, &chat, out)) return e;
  return RenderChat(ctx, chat, scope, out);
}

std::optional<ApiError> PrepareText(const RouteContext& ctx, const std::string& body,
                                    const std::string& scope, Prepared* out) {
  TextCompletionRequest text;
  if (auto e = ParseTextCompletionRequest(body, ctx.Limits(), &text)) return e;
  out->params = std::move(text.params);
  if (text.prompt_is_tokens) {
    out->prompt.tokens = std::move(text.prompt_tokens);
    return std::nullopt;
  }
  auto prompt = ctx.backend->PrepareText(text.prompt, scope);
  if (!prompt.ok()) return ApiErrorFromStatus(prompt.status());
  out->prompt = std::move(*prompt);
  return std::nullopt;
}

// Refuses an empty prompt or one that leaves no room to generate, and clamps max_tokens to
// the room left in the context and to the server's cap.
std::optional<ApiError> FitContext(const RouteContext& ctx, Endpoint ep, Prepared* p) {
  const char* param = ep == Endpoint::kChat ? "messages" : "prompt";
  int64_t n_prompt = int64_t(p->prompt.tokens.size());
  int64_t n_ctx = ctx.backend->n_ctx_per_slot();
  if (n_prompt == 0) return ApiError::Invalid("the prompt is empty", param);
  if (n_prompt >= n_ctx) {
    return ApiError::ContextExceeded(n_prompt, n_ctx, param);
  }
  int64_t room = n_ctx - n_prompt;
  int64_t want = p->params.max_tokens < 0 ? room : p->params.max_tokens;
  if (ctx.n_predict > 0) want = std::min<int64_t>(want, ctx.n_predict);
  p->params.max_tokens = int(std::min(want, room));
  return std::nullopt;
}

// What every prepared prompt goes through after its render: the model it names, the server's
// logit bias, the context's room.
std::optional<ApiError> FinishPrepare(const RouteContext& ctx, Endpoint ep, Prepared* out) {
  if (auto m = ctx.CheckModel(out->params.model)) return m;
  auto& bias = out->params.sampling.logit_bias;
  for (const auto& [token, value] : ctx.logit_bias) {
    const bool own = std::any_of(bias.begin(), bias.end(), [t = token](const auto& b) {
      return b.first == t;
    });
    if (!own) bias.emplace_back(token, value);
  }
  return FitContext(ctx, ep, out);
}

std::optional<ApiError> Prepare(const RouteContext& ctx, Endpoint ep, const std::string& body,
                                const std::string& scope, Prepared* out) {
  auto e = ep == Endpoint::kChat ? PrepareChat(ctx, body, scope, out)
                                 : PrepareText(ctx, body, scope, out);
  if (e) return e;
  return FinishPrepare(ctx, ep, out);
}

// A chat for the render routes: as PrepareChat, but images the model reads are refused before
// the projector runs (their rows are embeddings, which no token id names).
std::optional<ApiError> PrepareChatToRender(const RouteContext& ctx, const std::string& body,
                                            const std::string& scope, Prepared* out) {
  ChatRequest chat;
  if (auto e = ParseChat(ctx, body, &chat, out)) return e;
  if (out->n_images > 0 && ctx.images.mode == ImageMode::kRead) {
    return ApiError{ErrorKind::kInvalidRequest,
                    "the render routes do not take images: this server's model reads them as "
                    "embeddings, which no token id names; send the chat without its image parts",
                    "messages", "image_not_supported"};
  }
  return RenderChat(ctx, chat, scope, out);
}

// The template's grammar and stops join the client's sampling options and stops.
CompletionRequest ToEngineRequest(Prepared p, const Tenant& tenant) {
  CompletionRequest r;
  r.max_tokens = p.params.max_tokens;
  r.spec_n_max = p.params.spec_n_max;
  r.spec_n_min = p.params.spec_n_min;
  r.sampling = p.params.sampling;
  r.sampling.grammar = p.prompt.output.grammar;
  r.stop = std::move(p.params.stop);
  for (const std::string& s : p.prompt.output.additional_stops) {
    if (!s.empty() && std::find(r.stop.begin(), r.stop.end(), s) == r.stop.end()) {
      r.stop.push_back(s);
    }
  }
  r.prompt = std::move(p.prompt);
  r.tenant_salt = tenant.salt;
  return r;
}

// Writes the rest of a stream; runs on the httplib thread after the handler returned.
// Chat replies go through the output parser: each piece of text becomes the chunks of what
// it changed (reasoning, content, tool call pieces).
class StreamWriter {
 public:
  // With `api`, every chunk goes through it instead of out as "data: <chunk>"; `client_stop`
  // are the stop strings the client asked for.
  StreamWriter(std::shared_ptr<Flight> flight, bool include_usage, std::string first_text,
               const engine::OutputFormat& output, std::unique_ptr<ApiStream> api,
               std::vector<std::string> client_stop)
      : flight_(std::move(flight)),
        include_usage_(include_usage),
        first_text_(std::move(first_text)),
        chat_(flight_->meta().endpoint == Endpoint::kChat),
        parser_(output),
        api_(std::move(api)),
        client_stop_(std::move(client_stop)) {}

  bool Run(httplib::DataSink& sink) {
    sink_ = &sink;
    bool ok = SendText(first_text_, /*force=*/flight_->meta().endpoint == Endpoint::kChat);
    std::string text;
    while (ok && Wait(&text) == Event::kText) {
      ok = SendText(text, false);
      text.clear();
    }
    if (!ok) {  // the client is gone
      flight_->Abandon();
      flight_->Log(200);
      return false;
    }
    ok = Finish();
    flight_->Log(200);
    if (ok) sink.done();
    return ok;
  }

 private:
  Event Wait(std::string* text) {
    if (finished_) return Event::kFinished;
    Event ev = flight_->Wait(text);
    finished_ = ev == Event::kFinished;
    return ev;
  }

  bool Write(const std::string& json) {
    return WriteRaw(api_ ? api_->OnChunk(json) : SseData(json));
  }

  bool WriteRaw(const std::string& text) {
    return text.empty() || sink_->write(text.data(), text.size());
  }

  bool WriteDone() {
    if (!api_) return WriteRaw(SseDone());
    return WriteRaw(api_->OnEnd(AnswerEnd::Of(flight_->result()->stop_word, client_stop_)));
  }

  bool SendText(const std::string& raw, bool force) {
    std::string text = carry_.Take(raw);
    if (chat_) return SendChat(text, /*is_final=*/false, force);
    if (text.empty() && !force) return true;
    bool ok = Write(DeltaChunk(flight_->meta(), text, first_, include_usage_));
    first_ = false;
    return ok;
  }

  // Parses the reply so far and sends what changed; `force` sends the role chunk regardless.
  bool SendChat(const std::string& text, bool is_final, bool force) {
    reply_ += text;
    std::vector<engine::ChatDelta> deltas;
    if (!text.empty() || is_final) deltas = parser_.Update(reply_, is_final);
    if (deltas.empty() && force && first_) deltas.emplace_back();
    for (const engine::ChatDelta& d : deltas) {
      if (!Write(DumpJson(ChatDeltaJson(flight_->meta(), d, first_, include_usage_)))) {
        return false;
      }
      first_ = false;
    }
    return true;
  }

  std::string FinishReason(const CompletionResult& r) const {
    return chat_ ? ChatFinishReason(r.finish_reason, parser_.message())
                 : ClientFinishReason(r.finish_reason);
  }

  bool Finish() {
    const Result<CompletionResult>& r = flight_->result();
    if (!r.ok()) {
      ApiError e = ApiErrorFromStatus(r.status());
      if (api_) return WriteRaw(api_->OnError(e));
      return Write(ErrorBody(e)) && WriteRaw(SseDone());
    }
    std::string rest = carry_.Flush();
    if (chat_) {
      if (!SendChat(rest, /*is_final=*/true, false)) return false;
    } else if (!rest.empty() &&
               !Write(DeltaChunk(flight_->meta(), rest, first_, include_usage_))) {
      return false;
    }
    const std::string reason = FinishReason(*r);
    if (!Write(DumpJson(FinishChunkJson(flight_->meta(), *r, reason, include_usage_)))) {
      return false;
    }
    if (include_usage_ && !Write(UsageChunk(flight_->meta(), *r))) return false;
    return WriteDone();
  }

  std::shared_ptr<Flight> flight_;
  bool include_usage_;
  std::string first_text_;
  bool chat_;
  engine::ChatOutputParser parser_;
  std::string reply_;  // the chat reply so far (complete UTF-8)
  std::unique_ptr<ApiStream> api_;
  std::vector<std::string> client_stop_;
  httplib::DataSink* sink_ = nullptr;
  Utf8Carry carry_;
  bool first_ = true;
  bool finished_ = false;
};

void StartStream(std::shared_ptr<Flight> flight, bool include_usage, std::string first_text,
                 const engine::OutputFormat& output, std::unique_ptr<ApiStream> api,
                 std::vector<std::string> client_stop, httplib::Response& res) {
  auto writer = std::make_shared<StreamWriter>(std::move(flight), include_usage,
                                               std::move(first_text), output, std::move(api),
                                               std::move(client_stop));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [writer](size_t, httplib::DataSink& sink) { return writer->Run(sink); });
}

// Sends an error in the chat shape, or in the adapter's.
void Refuse(httplib::Response& res, const ApiAdapter* api, const ApiError& e) {
  if (api) SendErrorBody(res, e, api->ErrorBody(e));
  else SendError(res, e);
}

// Runs `body` on endpoint `ep`; with `api` (chat only), answers through it.
void HandleCompletion(const RouteContext& ctx, Endpoint ep, const std::string& body,
                      const ApiAdapter* api, const httplib::Request& req, httplib::Response& res) {
  MarkRequestLoggedByRoute();  // by the Flight, or below when the request is refused
  std::string route = RouteLabel(req.path);
  Tenant tenant = ctx.TenantOf(req);
  Prepared prepared;
  if (auto e = Prepare(ctx, ep, body, tenant.salt, &prepared)) {
    Refuse(res, api, *e);
    WriteLogLine(LogLine("request")
                     .Add("route", route)
                     .Add("status", (long long)HttpStatusOf(e->kind))
                     .Add("tenant", tenant.label)
                     .Add("error", e->message)
                     .Add("total_ms", SecondsSinceRequestStart() * 1000));
    return;
  }
  // The name the client asked for (an alias of this model), else the model's id.
  const std::string model_name =
      prepared.params.model.empty() ? ctx.model_id : prepared.params.model;
  ResponseMeta meta{ep, NewResponseId(ep), int64_t(std::time(nullptr)), model_name,
                    prepared.logprobs};
  bool stream = prepared.params.stream;
  bool include_usage = prepared.params.include_usage;
  const engine::OutputFormat output = prepared.prompt.output;
  StreamStart start{meta.model, int64_t(prepared.prompt.tokens.size())};
  std::vector<std::string> client_stop = prepared.params.stop;
  const size_t n_images = prepared.n_images;
  auto flight = std::make_shared<Flight>(ctx, req, meta, route, tenant.label,
                                         ToEngineRequest(std::move(prepared), tenant), stream);
  if (n_images > 0) {  // the response and the log say what the model saw of the images
    res.set_header(kImagesHeader, ImagesHeaderValue(ctx.images.mode, n_images));
    flight->NoteImages(ImagesHeaderValue(ctx.images.mode, n_images));
  }
  std::string first_text;
  Event ev = stream ? flight->Wait(&first_text) : (flight->Drain(), Event::kFinished);
  if (ev == Event::kFinished && !flight->result().ok()) {
    ApiError e = ApiErrorFromStatus(flight->result().status());
    Refuse(res, api, e);
    flight->Log(HttpStatusOf(e.kind));
    return;
  }
  if (stream) {
    StartStream(std::move(flight), include_usage, std::move(first_text), output,
                api ? api->NewStream(start) : nullptr, std::move(client_stop), res);
    return;
  }
  const CompletionResult& result = *flight->result();
  if (ep == Endpoint::kChat) {
    const engine::ChatMessage message = engine::ParseChatOutput(output, result.text);
    std::string chat_body = FinalBody(meta, result, &message);
    SendJson(res, api ? api->FinalBody(chat_body, AnswerEnd::Of(result.stop_word, client_stop))
                      : chat_body);
  } else {
    SendJson(res, FinalBody(meta, result));
  }
  flight->Log(200);
}

}  // namespace

void HandleChatVia(const RouteContext& ctx, const ApiAdapter& api, const std::string& chat_body,
                   const httplib::Request& req, httplib::Response& res) {
  HandleCompletion(ctx, Endpoint::kChat, chat_body, &api, req, res);
}

std::optional<ApiError> RenderCompletionPrompt(const RouteContext& ctx, Endpoint ep,
                                               const std::string& body, const std::string& scope,
                                               RenderedPrompt* out) {
  Prepared prepared;
  auto e = ep == Endpoint::kChat ? PrepareChatToRender(ctx, body, scope, &prepared)
                                 : PrepareText(ctx, body, scope, &prepared);
  if (!e) e = FinishPrepare(ctx, ep, &prepared);
  if (e) return e;
  out->tokens = std::move(prepared.prompt.tokens);
  out->params = std::move(prepared.params);
  return std::nullopt;
}

std::optional<ApiError> CountChatPromptTokens(const RouteContext& ctx,
                                              const std::string& chat_body,
                                              const std::string& scope, int64_t* n_tokens) {
  Prepared prepared;
  if (auto e = PrepareChat(ctx, chat_body, scope, &prepared)) return e;
  if (auto e = ctx.CheckModel(prepared.params.model)) return e;
  *n_tokens = int64_t(prepared.prompt.tokens.size());
  return std::nullopt;
}

void RegisterCompletionRoutes(httplib::Server& http, const RouteContext& ctx) {
  http.Post("/v1/chat/completions", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                         httplib::Response& res) {
    HandleCompletion(ctx, Endpoint::kChat, req.body, nullptr, req, res);
  }));
  http.Post("/v1/completions", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                    httplib::Response& res) {
    HandleCompletion(ctx, Endpoint::kText, req.body, nullptr, req, res);
  }));
}

}  // namespace prefixd::server
