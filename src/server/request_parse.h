// Parsing and validation of request bodies. Every check a client can fail is here, and each
// failure is an ApiError naming the offending parameter (OpenAI's "param"), so that the routes
// only ever see well-typed, in-range requests. Unknown fields are ignored, as most
// OpenAI-compatible servers do. Pure functions; thread-safe; never throw.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/sampler.h"
#include "engine/codec/types.h"
#include "server/api_error.h"
#include "server/image_part.h"

namespace prefixd::server {

// Parameters shared by /v1/chat/completions and /v1/completions.
struct GenerationParams {
  std::string model;          // "" when the client sent none
  int max_tokens = -1;        // -1: until the context is full
  engine::SamplingOptions sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // llama-server's "speculative.n_max" / "speculative.n_min" (-1: the server's; n_max 0: off).
  int spec_n_max = -1;
  int spec_n_min = -1;
};

struct ChatRequest {
  std::string messages_json;  // the "messages" array, validated, as JSON text
  std::string tools_json;     // the "tools" array as JSON text, or ""
  // Everything the template takes besides the messages: tools (= tools_json), tool_choice,
  // parallel_tool_calls, response_format's schema, chat_template_kwargs, enable_thinking,
  // reasoning_effort.
  engine::ChatRenderOptions render;
  bool logprobs = false;      // params.sampling.top_logprobs >= 0 when true
  GenerationParams params;
  // Image parts in the messages, each replaced by its text stand-in (image_part.h).
  size_t n_images = 0;
};

struct TextCompletionRequest {
  std::string prompt;                     // text, when the prompt was a string
  std::vector<engine::Token> prompt_tokens;  // when the prompt was an array of token ids
  bool prompt_is_tokens = false;
  GenerationParams params;
};

struct ParseLimits {
  int max_tokens_limit = 1 << 20;  // max_tokens above this is out of range (the context size)
  int vocab_hint = 1 << 30;        // token ids must be in [0, vocab_hint)
  ImageOptions images;             // what the messages' image parts become (image_part.h)
};

// Each returns nullopt and fills *out on success, or the error to answer.
std::optional<ApiError> ParseChatRequest(const std::string& body, const ParseLimits& limits,
                                         ChatRequest* out);
std::optional<ApiError> ParseTextCompletionRequest(const std::string& body,
                                                   const ParseLimits& limits,
                                                   TextCompletionRequest* out);

// POST /tokenize: {"content": str, "with_pieces"?: bool}.
// What a JSON schema (a response_format's, a tool's parameters) may cost to turn into a grammar:
// llama.cpp's converter spells out the orders optional properties may come in, so its time grows
// faster than the square of an object's optional properties (measured: 100 -> 0.03 s,
// 400 -> 0.42 s, 800 -> 2.1 s); past these a request is a 400 naming the schema.
inline constexpr size_t kMaxOptionalProperties = 128;
inline constexpr size_t kMaxSchemaNodes = 20000;   // JSON values in one schema
inline constexpr size_t kMaxToolsBytes = 1u << 20;  // all of a request's tool definitions

// The most tokens /tokenize answers with pieces: each piece is a JSON object of its own, ~30
// times the bytes of its id; more is a 400 (without pieces the answer is ids only).
inline constexpr size_t kMaxTokenizePieces = 32768;
// The longest text /tokenize takes: ~1M tokens, a second of tokenizing.
inline constexpr size_t kMaxTokenizeBytes = 4u << 20;

struct TokenizeRequest {
  std::string content;
  bool with_pieces = false;
};
std::optional<ApiError> ParseTokenizeRequest(const std::string& body, TokenizeRequest* out);

// POST /detokenize: {"tokens": [int, ...]}.
std::optional<ApiError> ParseDetokenizeRequest(const std::string& body,
                                               std::vector<engine::Token>* out,
                                               const ParseLimits& limits);

// POST /v1/cache/warm and /apply-template: {"messages": [...], "tools"?: [...]} or
// {"prompt": str}; a chat also takes what changes its render as in a chat completion
// (tool_choice, parallel_tool_calls, response_format, chat_template_kwargs, enable_thinking,
// reasoning_effort), so that it renders to the same tokens.
struct WarmRequest {
  bool is_chat = false;
  ChatRequest chat;
  std::string prompt;
};
// Its images are read as `images` says (a chat completion's are as ParseLimits::images says).
std::optional<ApiError> ParseWarmRequest(const std::string& body, WarmRequest* out,
                                         const ImageOptions& images = {});

}  // namespace prefixd::server
