#include "server/response_json.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

namespace prefixd::server {

using json = nlohmann::json;

namespace {

std::string Dump(const json& j) { return DumpJson(j); }

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(int(c));
  return out;
}

// A token of choices[].logprobs.content as OpenAI writes it.
json TokenJson(const engine::TokenProb& p) {
  return {{"token", p.piece}, {"logprob", p.logprob}, {"bytes", Bytes(p.piece)}};
}

json LogprobsJson(const engine::CompletionResult& result) {
  json content = json::array();
  for (const engine::TokenLogprobs& lp : result.logprobs) {
    json t = TokenJson(lp.chosen);
    t["top_logprobs"] = json::array();
    for (const engine::TokenProb& p : lp.top) t["top_logprobs"].push_back(TokenJson(p));
    content.push_back(std::move(t));
  }
  return {{"content", std::move(content)}};
}

json ToolCallsJson(const std::vector<engine::ChatToolCall>& calls) {
  json out = json::array();
  for (const auto& c : calls) {
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

json MessageJson(const engine::ChatMessage& m) {
  json msg = {{"role", "assistant"}, {"content", m.content}};
  if (!m.reasoning_content.empty()) msg["reasoning_content"] = m.reasoning_content;
  if (!m.tool_calls.empty()) {
    msg["tool_calls"] = ToolCallsJson(m.tool_calls);
    if (m.content.empty()) msg["content"] = nullptr;
  }
  return msg;
}

json UsageJson(const engine::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json TimingsJson(const engine::Usage& u) {
  json t = {{"cache_n", u.cached_tokens},   {"prompt_n", u.evaluated_tokens},
          {"prompt_ms", u.prefill_ms},    {"predicted_n", u.completion_tokens},
          {"predicted_ms", u.decode_ms},  {"queue_ms", u.queue_ms},
          {"restore_ms", u.restore_ms},   {"restored_bytes", u.restored_bytes},
          {"prompt_eval_ms", u.prompt_eval_ms}, {"prompt_chunks", u.prefill_chunks},
          {"capture_ms", u.capture_ms},   {"captures", u.captures},
          {"publish_ms", u.publish_ms},
          {"predicted_per_second",
           u.decode_ms > 0 ? 1000.0 * u.completion_tokens / u.decode_ms : 0.0}};
  if (u.draft_steps > 0) {  // llama-server's names, present when the request speculated
    t["draft_n"] = u.draft_tokens;
    t["draft_n_accepted"] = u.draft_accepted;
    t["draft_steps"] = u.draft_steps;
    t["draft_replays"] = u.draft_replays;
  }
  // Of cache_n: the tokens whose MTP-head history came back with them (draft-mtp).
  if (u.mtp_restored_tokens > 0) t["mtp_cache_n"] = u.mtp_restored_tokens;
  return t;
}

json Envelope(const ResponseMeta& meta, bool chunk) {
  const char* object = meta.endpoint == Endpoint::kText
                           ? "text_completion"
                           : (chunk ? "chat.completion.chunk" : "chat.completion");
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

json Choice(const ResponseMeta& meta, json content, const json& finish_reason) {
  json c = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (meta.endpoint == Endpoint::kText) c["text"] = std::move(content);
  else c["delta"] = std::move(content);
  return c;
}

}  // namespace

std::string NewResponseId(Endpoint endpoint) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char hex[25];
  std::snprintf(hex, sizeof hex, "%016llx%08llx", (unsigned long long)rng(),
                (unsigned long long)(rng() & 0xffffffffu));
  return std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + hex;
}

std::string ClientFinishReason(engine::FinishReason engine_reason) {
  return engine_reason == engine::FinishReason::kLength ? "length" : "stop";
}

std::string DumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ChatFinishReason(engine::FinishReason engine_reason, const engine::ChatMessage& m) {
  if (!m.tool_calls.empty() && engine_reason != engine::FinishReason::kLength) return "tool_calls";
  return ClientFinishReason(engine_reason);
}

json FinalJson(const ResponseMeta& meta, const engine::CompletionResult& result,
               const engine::ChatMessage* message) {
  json body = Envelope(meta, /*chunk=*/false);
  json choice = {{"index", 0},
                 {"logprobs", meta.logprobs ? LogprobsJson(result) : json(nullptr)},
                 {"finish_reason", ClientFinishReason(result.finish_reason)}};
  if (meta.endpoint == Endpoint::kText || message == nullptr) {
    if (meta.endpoint == Endpoint::kText) choice["text"] = result.text;
    else choice["message"] = {{"role", "assistant"}, {"content", result.text}};
  } else {
    choice["message"] = MessageJson(*message);
    choice["finish_reason"] = ChatFinishReason(result.finish_reason, *message);
  }
  body["choices"] = json::array({choice});
  body["usage"] = UsageJson(result.usage);
  body["timings"] = TimingsJson(result.usage);
  return body;
}

std::string FinalBody(const ResponseMeta& meta, const engine::CompletionResult& result,
                      const engine::ChatMessage* message) {
  return Dump(FinalJson(meta, result, message));
}

json ChatDeltaJson(const ResponseMeta& meta, const engine::ChatDelta& d, bool first,
                   bool include_usage) {
  json body = Envelope(meta, /*chunk=*/true);
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!d.reasoning_content.empty()) delta["reasoning_content"] = d.reasoning_content;
  if (!d.content.empty() || (d.reasoning_content.empty() && d.tool_index == d.npos)) {
    delta["content"] = d.content;
  }
  if (d.tool_index != d.npos) {
    json call = {{"index", d.tool_index}, {"function", {{"arguments", d.tool_call.arguments}}}};
    if (!d.tool_call.id.empty()) call["id"] = d.tool_call.id;
    if (!d.tool_call.name.empty()) {
      call["type"] = "function";
      call["function"]["name"] = d.tool_call.name;
    }
    delta["tool_calls"] = json::array({call});
  }
  body["choices"] = json::array({Choice(meta, std::move(delta), nullptr)});
  if (include_usage) body["usage"] = nullptr;
  return body;
}

std::string DeltaChunk(const ResponseMeta& meta, const std::string& text, bool first,
                       bool include_usage) {
  json body = Envelope(meta, /*chunk=*/true);
  json content;
  if (meta.endpoint == Endpoint::kText) {
    content = text;
  } else {
    content = json::object();
    if (first) content["role"] = "assistant";
    content["content"] = text;
  }
  body["choices"] = json::array({Choice(meta, std::move(content), nullptr)});
  if (include_usage) body["usage"] = nullptr;
  return Dump(body);
}

json FinishChunkJson(const ResponseMeta& meta, const engine::CompletionResult& result,
                     const std::string& finish_reason, bool include_usage) {
  json body = Envelope(meta, /*chunk=*/true);
  json content = meta.endpoint == Endpoint::kText ? json("") : json::object();
  body["choices"] = json::array({Choice(meta, std::move(content), finish_reason)});
  if (include_usage) body["usage"] = nullptr;
  body["timings"] = TimingsJson(result.usage);
  return body;
}

std::string UsageChunk(const ResponseMeta& meta, const engine::CompletionResult& result) {
  json body = Envelope(meta, /*chunk=*/true);
  body["choices"] = json::array();
  body["usage"] = UsageJson(result.usage);
  body["timings"] = TimingsJson(result.usage);
  return Dump(body);
}

}  // namespace prefixd::server
