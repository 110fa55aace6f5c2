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
#include <string>

#include "engine/engine.h"

namespace prefixd::server {

enum class Endpoint { kChat, kText };

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;        // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0;   // unix seconds
  std::string model;
};

// A fresh id with the endpoint's prefix and 24 random hex digits.
std::string NewResponseId(Endpoint endpoint);

// The non-streamed response.
std::string FinalBody(const ResponseMeta& meta, const engine::CompletionResult& result);

// Stream chunks (JSON text, not yet SSE-framed). `first` adds the assistant role to a chat
// delta. With include_usage every chunk carries "usage": null and UsageChunk() ends the stream.
std::string DeltaChunk(const ResponseMeta& meta, const std::string& text, bool first,
                       bool include_usage);
std::string FinishChunk(const ResponseMeta& meta, const engine::CompletionResult& result,
                        bool include_usage);
std::string UsageChunk(const ResponseMeta& meta, const engine::CompletionResult& result);

// The finish_reason the client sees for an engine finish reason.
std::string ClientFinishReason(const std::string& engine_reason);

}  // namespace prefixd::server
