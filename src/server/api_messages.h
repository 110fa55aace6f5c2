// The Anthropic Messages API (POST /v1/messages, POST /v1/messages/count_tokens) as a
// translation of chat completions.
//
// MessagesToChat() turns a Messages request into a /v1/chat/completions body:
//   system (a string or text blocks) -> a first system message; messages with text, thinking,
//   tool_use and tool_result blocks -> user / assistant (content, reasoning_content,
//   tool_calls) / tool messages, the tool results of a user turn first; tools {name,
//   description, input_schema} -> function tools; tool_choice auto / any / tool / none ->
//   auto / required / a named function / none, disable_parallel_tool_use ->
//   parallel_tool_calls false; max_tokens (required when creating); stop_sequences -> stop;
//   temperature, top_p, top_k; stream (with include_usage); thinking enabled / disabled ->
//   chat_template_kwargs.enable_thinking. metadata, service_tier and cache_control are
//   ignored; image and document blocks, server tools and redacted thinking that carries no text
//   are refused or skipped as documented in docs/http-api.md.
//
// NewMessagesAdapter() turns the chat answer back into a Message (content blocks thinking,
// text, tool_use with its input parsed; stop_reason end_turn / tool_use / max_tokens; usage with
// cache_read_input_tokens = the tokens prefixd restored from its cache) or the Messages event
// stream (message_start, content_block_start/delta/stop, message_delta, message_stop), and
// errors into {"type":"error","error":{"type","message"}}. Pure; thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "server/api_adapter.h"
#include "server/api_error.h"

namespace prefixd::server {

enum class MessagesCall {
  kCreate,       // POST /v1/messages: max_tokens is required
  kCountTokens,  // POST /v1/messages/count_tokens: generation parameters are not read
};

// Fills *chat_body (JSON text) or returns the 400 to answer, naming the field.
std::optional<ApiError> MessagesToChat(const std::string& body, MessagesCall call,
                                       std::string* chat_body);

std::unique_ptr<ApiAdapter> NewMessagesAdapter();

// The Anthropic error body for `error`: {"type":"error","error":{"type":...,"message":...}}.
std::string AnthropicErrorBody(const ApiError& error);
// The same for an error answered in the OpenAI shape with `http_status` (by the server before
// any route ran: a refused key, an unknown path); nullopt when `body` is not an OpenAI error.
std::optional<std::string> AnthropicErrorFromOpenAi(int http_status, const std::string& body);

}  // namespace prefixd::server
