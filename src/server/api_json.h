// JSON helpers shared by the API translators (api_responses.cpp, api_messages.cpp): parsing a
// request body safely and checking fields with errors that name the field by its path in the
// request ("input[2].content[0].text"). Pure; thread-safe; never throw.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace prefixd::server::api_json {

// Ordered: objects keep the key order they arrive in, so that tool-call arguments and schemas
// go back to the chat template as the model or the client wrote them.
using json = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;

// How deep a request body may nest: every entry point checks it before parsing.
inline constexpr int kMaxRequestDepth = 64;

// True when no array/object in `body` (JSON text) nests deeper than `max_depth` (strings
// skipped): checked before parsing, so that a deep body cannot exhaust the stack.
bool DepthWithin(const std::string& body, int max_depth);

// Parses `body` into *out: a JSON object nesting at most 64 deep, else a 400.
MaybeError ParseRequestObject(const std::string& body, json* out);

// The field `key` of `obj`, or nullptr when it is absent or null.
const json* Field(const json& obj, const char* key);

// A 400 "'<path>' must be <want>, got <type>" naming `path` as the parameter.
ApiError WrongType(const std::string& path, const char* want, const json& got);
// A 400 "<what> is not supported by this server" naming `path`.
ApiError Unsupported(const std::string& path, const std::string& what);

// The string at obj[key]: nullopt and *out set, or an error naming path + "." + key (or key
// alone when path is ""). `required` makes an absent field an error.
MaybeError GetString(const json& obj, const std::string& path, const char* key, bool required,
                     std::string* out);

// "path.key", or "key" when path is "".
std::string Join(const std::string& path, const char* key);
// "path[i]".
std::string Index(const std::string& path, size_t i);

// Compact JSON text; invalid UTF-8 replaced, never thrown on.
std::string Dump(const json& j);

// The hex part of a chat id ("chatcmpl-<hex>" -> "<hex>"), used to name the API's own ids.
std::string IdSuffix(const std::string& chat_id);

// Copies the chat-completions fields that prefixd (like llama-server) accepts beyond the
// API's own: top_k, seed, min_p, logit_bias, the penalties, chat_template_kwargs and
// enable_thinking. The chat path checks them.
void CopyChatExtensions(const json& req, json* chat);

// An SSE event with a name: "event: <name>\ndata: <json>\n\n".
std::string NamedEvent(const std::string& name, const json& data);

// ---- Reading the chat path's answers ----

struct ToolCallPiece {
  int index = 0;
  std::string id;         // "" after the first piece of a call
  std::string name;       // "" after the first piece of a call
  std::string arguments;  // the next piece of the arguments (JSON text), maybe ""
};

struct ChatUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt_tokens_details.cached_tokens
};

// A chat.completion (non-streamed): pieces are whole.
struct ChatAnswer {
  std::string id;
  int64_t created = 0;
  std::string model;
  std::string reasoning;  // message.reasoning_content
  std::string content;    // message.content ("" when null)
  std::vector<ToolCallPiece> tool_calls;
  std::string finish_reason;  // stop, length, tool_calls
  ChatUsage usage;
  json timings;  // prefixd's timings, passed on as they are (null when absent)
};

// One chat.completion.chunk: the delta's pieces, a finish_reason and/or the usage.
struct ChatChunk {
  std::string id;
  int64_t created = 0;
  std::string reasoning;
  std::string content;
  std::vector<ToolCallPiece> tool_calls;
  std::string finish_reason;  // "" when this chunk has none
  bool has_usage = false;
  ChatUsage usage;
  json timings;
};

// Read what the chat path produced. The chat path only ever produces well-formed answers;
// missing fields read as empty.
ChatAnswer ReadChatAnswer(const std::string& chat_json);
ChatChunk ReadChatChunk(const std::string& chunk_json);

}  // namespace prefixd::server::api_json
