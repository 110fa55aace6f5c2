// The OpenAI response bodies: chat.completion, text_completion and their streamed chunks.
//
// Every final body and the usage chunk carry
//   "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
//             "prompt_tokens_details": {"cached_tokens"}}
// and, as llama-server does, a top-level
//   "timings": {"cache_n", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "queue_ms"}
// where cache_n is the tokens restored from the cache and prompt_n the tokens evaluated.
// Strings are emitted with invalid UTF-8 replaced, never thrown on. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/chat/chat_output.h"
#include "engine/engine.h"

namespace prefixd::server {

enum class Endpoint { kChat, kText };

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;        // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0;   // unix seconds
  std::string model;
  bool logprobs = false;  // the client asked for logprobs: choices[].logprobs is filled
};

// A fresh id with the endpoint's prefix and 24 random hex digits.
std::string NewResponseId(Endpoint endpoint);

// The non-streamed response. For chat, `message` is the reply as parsed (content,
// reasoning_content, tool_calls); null for text completions (result.text is the reply).
// The JSON form is what other APIs' adapters translate from.
nlohmann::json FinalJson(const ResponseMeta& meta, const engine::CompletionResult& result,
                         const engine::ChatMessage* message);
std::string FinalBody(const ResponseMeta& meta, const engine::CompletionResult& result,
                      const engine::ChatMessage* message = nullptr);

// A chat stream chunk for one parsed delta: delta.reasoning_content, delta.content or
// delta.tool_calls [{index, id, type, function: {name, arguments}}]; `first` adds the role.
nlohmann::json ChatDeltaJson(const ResponseMeta& meta, const engine::ChatDelta& delta, bool first,
                             bool include_usage);

// Stream chunks (JSON text, not yet SSE-framed). `first` adds the assistant role to a chat
// delta. With include_usage every chunk carries "usage": null and UsageChunk() ends the stream.
std::string DeltaChunk(const ResponseMeta& meta, const std::string& text, bool first,
                       bool include_usage);
// The last chunk with choices; `finish_reason` as ClientFinishReason() or ChatFinishReason().
nlohmann::json FinishChunkJson(const ResponseMeta& meta, const engine::CompletionResult& result,
                               const std::string& finish_reason, bool include_usage);
std::string UsageChunk(const ResponseMeta& meta, const engine::CompletionResult& result);

// The finish_reason the client sees for an engine finish reason.
std::string ClientFinishReason(engine::FinishReason engine_reason);
// The same for a chat reply: "tool_calls" when the reply parsed into tool calls (and was not
// cut off by the length limit).
std::string ChatFinishReason(engine::FinishReason engine_reason,
                             const engine::ChatMessage& message);

// JSON text of a chunk or body, invalid UTF-8 replaced.
std::string DumpJson(const nlohmann::json& j);

}  // namespace prefixd::server
