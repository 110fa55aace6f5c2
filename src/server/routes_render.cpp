// POST /v1/chat/completions/render, POST /v1/completions/render and GET /version: what the
// routers built for vLLM call on an engine (llm-d's kv-cache indexer tokenizes every request
// through the render routes; SGLang's router, SMG, takes a worker that answers /version for an
// OpenAI-compatible one and reads its load from vLLM's gauges on /metrics).
//
// A render answers vLLM's GenerateRequest: the prompt's token ids, exactly those a completion
// with the same body evaluates (RenderCompletionPrompt runs the completion routes' own
// preparation), with the sampling parameters as that completion would run them. The chat route
// answers one object; the completions route a list of them, one per prompt (prefixd takes one
// prompt per request, as /v1/completions does). Nothing runs on the model.
#include <nlohmann/json.hpp>

#include "server/http_io.h"
#include "server/routes.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// vLLM's SamplingParams, for the fields prefixd has: what the completion would sample with.
json SamplingParamsJson(const GenerationParams& p) {
  const engine::SamplingOptions& s = p.sampling;
  return {{"n", 1},
          {"max_tokens", p.max_tokens},
          {"temperature", s.temperature},
          {"top_p", s.top_p},
          {"top_k", s.top_k},
          {"min_p", s.min_p},
          {"seed", s.seed},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty},
          {"repetition_penalty", s.repetition_penalty},
          {"stop", p.stop},
          {"ignore_eos", s.ignore_eos},
          {"logprobs", s.top_logprobs < 0 ? json(nullptr) : json(s.top_logprobs)}};
}

// vLLM's GenerateRequest; the fields prefixd has no use for (multimodal features, a cache salt,
// a priority, KV transfer) carry vLLM's defaults.
json GenerateRequestJson(const RouteContext& ctx, Endpoint ep, const RenderedPrompt& r) {
  const std::string& model = r.params.model.empty() ? ctx.model_id : r.params.model;
  return {{"request_id", NewResponseId(ep)},
          {"token_ids", r.tokens},
          {"features", nullptr},
          {"sampling_params", SamplingParamsJson(r.params)},
          {"model", model},
          {"stream", r.params.stream},
          {"stream_options",
           r.params.include_usage ? json{{"include_usage", true}} : json(nullptr)},
          {"cache_salt", nullptr},
          {"priority", 0},
          {"kv_transfer_params", nullptr},
          {"token_offsets", nullptr}};
}

void Render(const RouteContext& ctx, Endpoint ep, const httplib::Request& req,
            httplib::Response& res) {
  RenderedPrompt rendered;
  if (auto e = RenderCompletionPrompt(ctx, ep, req.body, ctx.TenantOf(req).salt, &rendered)) {
    return SendError(res, *e);
  }
  json one = GenerateRequestJson(ctx, ep, rendered);
  SendJson(res, Dump(ep == Endpoint::kChat ? one : json::array({std::move(one)})));
}

}  // namespace

void RegisterRenderRoutes(httplib::Server& http, const RouteContext& ctx) {
  http.Post("/v1/chat/completions/render", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                                httplib::Response& res) {
    Render(ctx, Endpoint::kChat, req, res);
  }));
  http.Post("/v1/completions/render", Admitted(ctx, [&ctx](const httplib::Request& req,
                                                           httplib::Response& res) {
    Render(ctx, Endpoint::kText, req, res);
  }));
  // vLLM's /version is how SMG tells an OpenAI-compatible worker from SGLang's own when
  // /v1/models' owned_by names neither (docs/deployment.md). The build carries no version
  // number, so the server names itself.
  http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    SendJson(res, Dump({{"version", "prefixd"}}));
  });
}

}  // namespace prefixd::server
