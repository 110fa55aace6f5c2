#include "server/api_messages.h"

#include "server/api_json.h"
#include "server/image_part.h"

namespace prefixd::server {
namespace {

using namespace api_json;

// ---------------------------------------------------------------------------------------------
// Request: Messages body -> chat completions body.

// Claude Code starts its system prompt with "x-anthropic-billing-header: ...; cch=<5 hex>;"
// where cch changes on every request, which would end every cached prefix right there. The
// stamp means nothing to a local model: it is replaced by a constant (as llama-server does).
void NormalizeBillingHeader(std::string* text) {
  static const std::string kHeader = "x-anthropic-billing-header:";
  if (text->rfind(kHeader, 0) != 0) return;
  size_t at = text->find("cch=", kHeader.size());
  if (at == std::string::npos) return;
  size_t begin = at + 4, end = text->find(';', begin);
  if (end == std::string::npos || end - begin > 16) return;
  text->replace(begin, end - begin, std::string(end - begin, 'f'));
}

// The text of a text block; any other block is an error.
MaybeError TextBlock(const json& b, const std::string& where, std::string* text) {
  std::string type;
  if (!b.is_object()) return WrongType(where, "an object", b);
  if (auto e = GetString(b, where, "type", true, &type)) return e;
  if (type != "text") {
    return Unsupported(Join(where, "type"), "a '" + type + "' block here (only text)");
  }
  return GetString(b, where, "text", true, text);
}

// The text of an array of text blocks, joined by `sep`; any other block is an error.
MaybeError TextBlocks(const json& blocks, const std::string& path, const char* sep,
                      std::string* out) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::string text;
    if (auto e = TextBlock(blocks[i], Index(path, i), &text)) return e;
    if (i > 0) *out += sep;
    *out += text;
  }
  return std::nullopt;
}

MaybeError ConvertSystem(const json& req, json* messages) {
  const json* s = Field(req, "system");
  if (!s) return std::nullopt;
  std::string text;
  if (s->is_string()) {
    text = s->get<std::string>();
    NormalizeBillingHeader(&text);
  } else if (s->is_array()) {
    json blocks = *s;
    for (json& b : blocks) {
      if (b.is_object() && b.contains("text") && b["text"].is_string()) {
        std::string t = b["text"].get<std::string>();
        NormalizeBillingHeader(&t);
        b["text"] = t;
      }
    }
    if (auto e = TextBlocks(blocks, "system", "\n\n", &text)) return e;
  } else {
    return WrongType("system", "a string or an array of text blocks", *s);
  }
  if (!text.empty()) messages->push_back({{"role", "system"}, {"content", text}});
  return std::nullopt;
}

// An image block's source as a chat image part (image_part.h reads and checks the image): a
// base64 source as a data URL, a url source as it is (the chat path refuses remote URLs).
MaybeError ImageBlock(const json& b, const std::string& where, json* out) {
  const std::string spath = Join(where, "source");
  const json* src = Field(b, "source");
  if (!src) return ApiError::Invalid("'" + spath + "' is required", spath);
  if (!src->is_object()) return WrongType(spath, "an object", *src);
  std::string type, media_type, data;
  if (auto e = GetString(*src, spath, "type", true, &type)) return e;
  if (type == "url") {
    if (auto e = GetString(*src, spath, "url", true, &data)) return e;
    *out = ChatImagePart<json>(std::move(data), spath);
    return std::nullopt;
  }
  if (type != "base64") {
    const std::string tpath = Join(spath, "type");
    return ApiError::Invalid(tpath + ": image source type '" + type + "': this server keeps no "
                                     "files; send a base64 source",
                             tpath);
  }
  if (auto e = GetString(*src, spath, "media_type", false, &media_type)) return e;
  if (auto e = GetString(*src, spath, "data", true, &data)) return e;
  *out = ChatImagePart<json>(ImageDataUrl(media_type, data), spath);
  return std::nullopt;
}

// A tool result's content array (text and image blocks): its texts joined by "\n" when it
// has no image, else text and image parts in order.
MaybeError ToolResultContent(const json& blocks, const std::string& path, json* out) {
  json parts = json::array();
  bool has_image = false;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const json& b = blocks[i];
    const std::string where = Index(path, i);
    if (b.is_object() && b.value("type", "") == "image") {
      json image;
      if (auto e = ImageBlock(b, where, &image)) return e;
      parts.push_back(std::move(image));
      has_image = true;
      continue;
    }
    std::string text;
    if (auto e = TextBlock(b, where, &text)) return e;
    parts.push_back({{"type", "text"}, {"text", std::move(text)}});
  }
  if (has_image) {
    *out = std::move(parts);
    return std::nullopt;
  }
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) text += '\n';
    text += parts[i]["text"].get_ref<const std::string&>();
  }
  *out = std::move(text);
  return std::nullopt;
}

// One Anthropic message's blocks, sorted into what the chat messages need.
struct Blocks {
  std::vector<std::string> texts;
  json user_parts = json::array();  // a user turn's text and image parts, in order
  bool has_image = false;
  std::string reasoning;
  json tool_calls = json::array();
  json tool_results = json::array();  // chat "tool" messages
};

MaybeError ToolResult(const json& b, const std::string& where, Blocks* out) {
  std::string id;
  json content = "";
  if (auto e = GetString(b, where, "tool_use_id", true, &id)) return e;
  const json* c = Field(b, "content");
  if (c && c->is_string()) {
    content = *c;
  } else if (c && c->is_array()) {
    if (auto e = ToolResultContent(*c, Join(where, "content"), &content)) return e;
  } else if (c) {
    return WrongType(Join(where, "content"), "a string or an array of text and image blocks", *c);
  }
  out->tool_results.push_back(
      {{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(content)}});
  return std::nullopt;
}

MaybeError ToolUse(const json& b, const std::string& where, Blocks* out) {
  std::string id, name;
  if (auto e = GetString(b, where, "id", true, &id)) return e;
  if (auto e = GetString(b, where, "name", true, &name)) return e;
  const json* input = Field(b, "input");
  if (input && !input->is_object()) return WrongType(Join(where, "input"), "an object", *input);
  std::string args = input ? Dump(*input) : "{}";
  out->tool_calls.push_back(
      {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}});
  return std::nullopt;
}

MaybeError ReadBlock(const json& b, const std::string& where, const std::string& role,
                     Blocks* out) {
  if (!b.is_object()) return WrongType(where, "an object", b);
  std::string type, text;
  if (auto e = GetString(b, where, "type", true, &type)) return e;
  bool assistant = role == "assistant";
  if (type == "text") {
    if (auto e = GetString(b, where, "text", true, &text)) return e;
    out->user_parts.push_back({{"type", "text"}, {"text", text}});
    out->texts.push_back(std::move(text));
    return std::nullopt;
  }
  if (type == "image" && !assistant) {
    json image;
    if (auto e = ImageBlock(b, where, &image)) return e;
    out->user_parts.push_back(std::move(image));
    out->has_image = true;
    return std::nullopt;
  }
  if (type == "thinking" && assistant) {
    if (auto e = GetString(b, where, "thinking", true, &text)) return e;
    out->reasoning += text;
    return std::nullopt;
  }
  if (type == "redacted_thinking" && assistant) return std::nullopt;  // no text to render
  if (type == "tool_use" && assistant) return ToolUse(b, where, out);
  if (type == "tool_result" && !assistant) return ToolResult(b, where, out);
  if (type == "document") {
    return Unsupported(Join(where, "type"), "a 'document' block (this server reads text and "
                                            "images only)");
  }
  return Unsupported(Join(where, "type"), "a '" + type + "' block in a " + role + " message");
}

// Appends the chat messages for one Anthropic message: a user turn's tool results come first
// (they answer the assistant's calls just before), then its text.
MaybeError ConvertMessage(const json& msg, const std::string& path, json* messages) {
  if (!msg.is_object()) return WrongType(path, "an object", msg);
  std::string role;
  if (auto e = GetString(msg, path, "role", true, &role)) return e;
  if (role != "user" && role != "assistant" && role != "system") {
    return ApiError::Invalid("'" + Join(path, "role") + "' must be user, assistant or system, "
                                 "got '" + role + "'",
                             Join(path, "role"));
  }
  std::string cpath = Join(path, "content");
  const json* c = Field(msg, "content");
  if (!c) return ApiError::Invalid("'" + cpath + "' is required", cpath);
  // A system message inside the conversation (Claude Code sends its environment so): text
  // only; request_parse places it where the template takes it (system_messages.h).
  if (role == "system") {
    std::string text;
    if (c->is_string()) {
      text = c->get<std::string>();
    } else if (!c->is_array()) {
      return WrongType(cpath, "a string or an array of text blocks", *c);
    } else if (auto e = TextBlocks(*c, cpath, "\n\n", &text)) {
      return e;
    }
    messages->push_back({{"role", "system"}, {"content", text}});
    return std::nullopt;
  }
  if (c->is_string()) {
    messages->push_back({{"role", role}, {"content", *c}});
    return std::nullopt;
  }
  if (!c->is_array()) return WrongType(cpath, "a string or an array of content blocks", *c);
  Blocks blocks;
  for (size_t i = 0; i < c->size(); ++i) {
    if (auto e = ReadBlock((*c)[i], Index(cpath, i), role, &blocks)) return e;
  }
  for (json& t : blocks.tool_results) messages->push_back(std::move(t));
  if (role == "assistant") {
    std::string text;
    for (const std::string& t : blocks.texts) text += t;
    json m = {{"role", "assistant"}, {"content", text}};
    if (!blocks.reasoning.empty()) m["reasoning_content"] = blocks.reasoning;
    if (!blocks.tool_calls.empty()) m["tool_calls"] = std::move(blocks.tool_calls);
    messages->push_back(std::move(m));
  } else if (blocks.has_image) {
    messages->push_back({{"role", "user"}, {"content", std::move(blocks.user_parts)}});
  } else if (!blocks.texts.empty() || blocks.tool_results.empty()) {
    json content;
    if (blocks.texts.size() == 1) {
      content = blocks.texts[0];
    } else {
      content = json::array();
      for (const std::string& t : blocks.texts) content.push_back({{"type", "text"}, {"text", t}});
    }
    if (content.is_array() && content.empty()) content = "";
    messages->push_back({{"role", "user"}, {"content", std::move(content)}});
  }
  return std::nullopt;
}

MaybeError ConvertMessages(const json& req, json* chat) {
  json messages = json::array();
  if (auto e = ConvertSystem(req, &messages)) return e;
  const json* m = Field(req, "messages");
  if (!m) return ApiError::Invalid("'messages' is required", "messages");
  if (!m->is_array()) return WrongType("messages", "an array", *m);
  if (m->empty()) return ApiError::Invalid("'messages' must not be empty", "messages");
  for (size_t i = 0; i < m->size(); ++i) {
    if (auto e = ConvertMessage((*m)[i], Index("messages", i), &messages)) return e;
  }
  (*chat)["messages"] = std::move(messages);
  return std::nullopt;
}

MaybeError ConvertTools(const json& req, json* chat) {
  const json* tools = Field(req, "tools");
  if (!tools) return std::nullopt;
  if (!tools->is_array()) return WrongType("tools", "an array", *tools);
  json out = json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    std::string path = Index("tools", i), type = "custom", name, description;
    if (!t.is_object()) return WrongType(path, "an object", t);
    if (auto e = GetString(t, path, "type", false, &type)) return e;
    if (type != "custom") {
      return Unsupported(Join(path, "type"), "tool type '" + type + "' (only client tools with an "
                                             "input_schema)");
    }
    if (auto e = GetString(t, path, "name", true, &name)) return e;
    if (auto e = GetString(t, path, "description", false, &description)) return e;
    const json* schema = Field(t, "input_schema");
    if (!schema) return ApiError::Invalid("'" + Join(path, "input_schema") + "' is required",
                                          Join(path, "input_schema"));
    if (!schema->is_object()) return WrongType(Join(path, "input_schema"), "an object", *schema);
    json fn = {{"name", name}, {"parameters", *schema}};
    if (!description.empty()) fn["description"] = description;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  if (!out.empty()) (*chat)["tools"] = std::move(out);
  return std::nullopt;
}

MaybeError ConvertToolChoice(const json& req, json* chat) {
  const json* tc = Field(req, "tool_choice");
  if (!tc) return std::nullopt;
  if (!tc->is_object()) return WrongType("tool_choice", "an object", *tc);
  std::string type, name;
  if (auto e = GetString(*tc, "tool_choice", "type", true, &type)) return e;
  if (type == "auto" || type == "none") {
    (*chat)["tool_choice"] = type;
  } else if (type == "any") {
    (*chat)["tool_choice"] = "required";
  } else if (type == "tool") {
    if (auto e = GetString(*tc, "tool_choice", "name", true, &name)) return e;
    (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else {
    return ApiError::Invalid("'tool_choice.type' must be one of auto, any, tool, none, got '" +
                                 type + "'",
                             "tool_choice.type");
  }
  if (const json* d = Field(*tc, "disable_parallel_tool_use")) {
    if (!d->is_boolean()) return WrongType("tool_choice.disable_parallel_tool_use", "a boolean", *d);
    if (*d == true) (*chat)["parallel_tool_calls"] = false;
  }
  return std::nullopt;
}

MaybeError ConvertThinking(const json& req, json* chat) {
  const json* t = Field(req, "thinking");
  if (!t) return std::nullopt;
  if (!t->is_object()) return WrongType("thinking", "an object", *t);
  std::string type;
  if (auto e = GetString(*t, "thinking", "type", true, &type)) return e;
  if (type != "enabled" && type != "disabled" && type != "adaptive") {
    return ApiError::Invalid("'thinking.type' must be enabled, disabled or adaptive, got '" +
                                 type + "'",
                             "thinking.type");
  }
  json& kwargs = (*chat)["chat_template_kwargs"];  // the client's own, when it sent some
  if (kwargs.is_null()) kwargs = json::object();
  if (!kwargs.is_object()) return WrongType("chat_template_kwargs", "an object", kwargs);
  kwargs["enable_thinking"] = type != "disabled";
  // budget_tokens: the reasoning block's budget (llama-server's thinking_budget_tokens).
  if (const json* b = Field(*t, "budget_tokens"); b && type == "enabled") {
    if (!b->is_number_integer() || b->get<int64_t>() < 0) {
      return WrongType("thinking.budget_tokens", "a non-negative integer", *b);
    }
    (*chat)["thinking_budget_tokens"] = *b;
  }
  return std::nullopt;
}

// output_config.effort (low, medium, high, max) is how hard the model should think: the
// template's reasoning_effort where it has one (gpt-oss), "max" being its "high". Other
// output_config fields (a format) are not this server's; ignored.
MaybeError ConvertEffort(const json& req, json* chat) {
  const json* oc = Field(req, "output_config");
  if (!oc) return std::nullopt;
  if (!oc->is_object()) return WrongType("output_config", "an object", *oc);
  std::string effort;
  if (auto e = GetString(*oc, "output_config", "effort", false, &effort)) return e;
  if (effort.empty()) return std::nullopt;
  if (effort != "low" && effort != "medium" && effort != "high" && effort != "max") {
    return ApiError::Invalid("'output_config.effort' must be low, medium, high or max, got '" +
                                 effort + "'",
                             "output_config.effort");
  }
  (*chat)["reasoning_effort"] = effort == "max" ? "high" : effort;
  return std::nullopt;
}

MaybeError ConvertGeneration(const json& req, MessagesCall call, json* chat) {
  if (const json* m = Field(req, "model")) (*chat)["model"] = *m;
  if (call == MessagesCall::kCountTokens) return std::nullopt;
  const json* max = Field(req, "max_tokens");
  if (!max) return ApiError::Invalid("'max_tokens' is required", "max_tokens");
  (*chat)["max_tokens"] = *max;
  for (const char* key : {"temperature", "top_p"}) {
    if (const json* v = Field(req, key)) (*chat)[key] = *v;
  }
  if (const json* s = Field(req, "stop_sequences")) (*chat)["stop"] = *s;
  if (auto e = ConvertEffort(req, chat)) return e;
  if (const json* s = Field(req, "stream")) {
    (*chat)["stream"] = *s;
    if (*s == true) (*chat)["stream_options"] = {{"include_usage", true}};
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Response: chat answer -> Message and events.

std::string StopReason(const std::string& finish_reason, bool has_tool_calls,
                       const AnswerEnd& end) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls" || has_tool_calls) return "tool_use";
  if (!end.stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

json StopSequence(const AnswerEnd& end) {
  return end.stop_sequence.empty() ? json() : json(end.stop_sequence);
}

json UsageJson(const ChatUsage& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens},
          {"output_tokens", u.completion_tokens}};
}

json ToolUseBlock(const std::string& id, const std::string& name, const std::string& args) {
  json input = json::parse(args.empty() ? "{}" : args, nullptr, false);
  if (input.is_discarded() || !input.is_object()) input = json::object();
  return {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", std::move(input)}};
}

json MessageObject(const std::string& id, const std::string& model, json content,
                   const json& stop_reason, const json& stop_sequence, const ChatUsage& usage) {
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", std::move(content)},
          {"stop_reason", stop_reason},
          {"stop_sequence", stop_sequence},
          {"usage", UsageJson(usage)}};
}

std::string MessageId(const std::string& chat_id) { return "msg_" + IdSuffix(chat_id); }

// The Messages event stream, built from chat chunks. Content blocks open and close in order,
// at most one at a time: thinking, text, then each tool_use.
class MessagesStream : public ApiStream {
 public:
  explicit MessagesStream(StreamStart start) : start_(std::move(start)) {}

  std::string OnChunk(const std::string& chunk_json) override {
    ChatChunk c = ReadChatChunk(chunk_json);
    std::string out = Begin(c.id);
    if (!c.reasoning.empty()) out += Piece(Kind::kThinking, c.reasoning);
    if (!c.content.empty()) out += Piece(Kind::kText, c.content);
    for (const ToolCallPiece& p : c.tool_calls) out += CallPiece(p);
    if (!c.finish_reason.empty()) finish_reason_ = c.finish_reason;
    if (c.has_usage) usage_ = c.usage;
    return out;
  }

  std::string OnEnd(const AnswerEnd& end) override {
    std::string out = Begin("");
    out += Close();
    json delta = {{"stop_reason", StopReason(finish_reason_, saw_tool_use_, end)},
                  {"stop_sequence", StopSequence(end)}};
    out += Event("message_delta", {{"delta", delta}, {"usage", UsageJson(usage_)}});
    return out + Event("message_stop", json::object());
  }

  std::string OnError(const ApiError& error) override {
    std::string out = Begin("");
    out += Close();
    return out + NamedEvent("error", json::parse(AnthropicErrorBody(error), nullptr, false));
  }

 private:
  enum class Kind { kNone, kThinking, kText, kToolUse };

  static std::string Event(const char* type, json data) {
    data["type"] = type;
    return NamedEvent(type, data);
  }

  std::string Begin(const std::string& chat_id) {
    if (started_) return "";
    started_ = true;
    ChatUsage u;
    u.prompt_tokens = start_.n_prompt_tokens;  // the cached part is known at the end
    json msg = MessageObject(MessageId(chat_id.empty() ? "x-000000000000000000000000" : chat_id),
                             start_.model, json::array(), nullptr, nullptr, u);
    return Event("message_start", {{"message", std::move(msg)}});
  }

  std::string Piece(Kind kind, const std::string& text) {
    std::string out;
    if (open_ != kind) {
      out += Close();  // before Open(): it closes the block Open() replaces
      out += Open(kind, nullptr);
    }
    json delta = kind == Kind::kText ? json{{"type", "text_delta"}, {"text", text}}
                                     : json{{"type", "thinking_delta"}, {"thinking", text}};
    return out + Event("content_block_delta", {{"index", index_}, {"delta", std::move(delta)}});
  }

  std::string CallPiece(const ToolCallPiece& p) {
    std::string out;
    if (open_ != Kind::kToolUse || p.index != call_index_) {
      out += Close();  // before Open(): it closes the block Open() replaces
      out += Open(Kind::kToolUse, &p);
    }
    if (p.arguments.empty()) return out;
    return out + Event("content_block_delta",
                       {{"index", index_},
                        {"delta", {{"type", "input_json_delta"}, {"partial_json", p.arguments}}}});
  }

  std::string Open(Kind kind, const ToolCallPiece* call) {
    open_ = kind;
    ++index_;
    json block;
    if (kind == Kind::kThinking) block = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
    if (kind == Kind::kText) block = {{"type", "text"}, {"text", ""}};
    if (kind == Kind::kToolUse) {
      call_index_ = call->index;
      saw_tool_use_ = true;
      std::string id = call->id.empty() ? "toolu_" + std::to_string(call->index) : call->id;
      block = {{"type", "tool_use"}, {"id", id}, {"name", call->name}, {"input", json::object()}};
    }
    return Event("content_block_start", {{"index", index_}, {"content_block", std::move(block)}});
  }

  // Closes the open block; a thinking block gets its (empty) signature first, as clients
  // expect one before the block ends.
  std::string Close() {
    if (open_ == Kind::kNone) return "";
    std::string out;
    if (open_ == Kind::kThinking) {
      out += Event("content_block_delta",
                   {{"index", index_}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
    }
    open_ = Kind::kNone;
    return out + Event("content_block_stop", {{"index", index_}});
  }

  StreamStart start_;
  bool started_ = false;
  Kind open_ = Kind::kNone;
  int index_ = -1;  // the open (or last) block's index
  int call_index_ = -1;
  bool saw_tool_use_ = false;
  std::string finish_reason_;
  ChatUsage usage_;
};

class MessagesAdapter : public ApiAdapter {
 public:
  std::string FinalBody(const std::string& chat_json, const AnswerEnd& end) const override {
    ChatAnswer a = ReadChatAnswer(chat_json);
    json content = json::array();
    if (!a.reasoning.empty()) {
      content.push_back({{"type", "thinking"}, {"thinking", a.reasoning}, {"signature", ""}});
    }
    if (!a.content.empty() || (a.reasoning.empty() && a.tool_calls.empty())) {
      content.push_back({{"type", "text"}, {"text", a.content}});
    }
    for (const ToolCallPiece& c : a.tool_calls) content.push_back(ToolUseBlock(c.id, c.name, c.arguments));
    json m = MessageObject(MessageId(a.id), a.model, std::move(content),
                           StopReason(a.finish_reason, !a.tool_calls.empty(), end),
                           StopSequence(end), a.usage);
    if (!a.timings.is_null()) m["timings"] = a.timings;
    return Dump(m);
  }

  std::string ErrorBody(const ApiError& error) const override {
    ApiError e = error;
    if (e.param == "stop") e.param = "stop_sequences";
    if (size_t at = e.message.find("'stop'"); at != std::string::npos) {
      e.message.replace(at, 6, "'stop_sequences'");
    }
    return AnthropicErrorBody(e);
  }

  std::unique_ptr<ApiStream> NewStream(const StreamStart& start) const override {
    return std::make_unique<MessagesStream>(start);
  }
};

const char* AnthropicErrorType(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUnauthorized: return "authentication_error";
    case ErrorKind::kForbidden: return "permission_error";
    case ErrorKind::kNotFound:
    case ErrorKind::kModelNotFound: return "not_found_error";
    case ErrorKind::kPayloadTooLarge: return "request_too_large";
    case ErrorKind::kTooManyConnections: return "rate_limit_error";
    case ErrorKind::kOverloaded: return "overloaded_error";
    case ErrorKind::kInternal: return "api_error";
    default: return "invalid_request_error";
  }
}

}  // namespace

std::optional<ApiError> MessagesToChat(const std::string& body, MessagesCall call,
                                       std::string* chat_body) {
  json req;
  if (auto e = ParseRequestObject(body, &req)) return e;
  json chat = json::object();
  CopyChatExtensions(req, &chat);
  if (auto e = ConvertMessages(req, &chat)) return e;
  if (auto e = ConvertTools(req, &chat)) return e;
  if (auto e = ConvertToolChoice(req, &chat)) return e;
  if (auto e = ConvertThinking(req, &chat)) return e;
  if (auto e = ConvertGeneration(req, call, &chat)) return e;
  *chat_body = Dump(chat);
  return std::nullopt;
}

std::unique_ptr<ApiAdapter> NewMessagesAdapter() { return std::make_unique<MessagesAdapter>(); }

std::optional<std::string> AnthropicErrorFromOpenAi(int http_status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  const json* e = j.is_object() && !j.contains("type") ? Field(j, "error") : nullptr;
  const json* message = e ? Field(*e, "message") : nullptr;
  if (!message || !message->is_string()) return std::nullopt;
  const char* type = http_status == 401   ? "authentication_error"
                     : http_status == 403 ? "permission_error"
                     : http_status == 404 ? "not_found_error"
                     : http_status == 413 ? "request_too_large"
                     : http_status == 429 ? "rate_limit_error"
                     : http_status == 503 ? "overloaded_error"
                     : http_status >= 500 ? "api_error"
                                          : "invalid_request_error";
  return Dump({{"type", "error"}, {"error", {{"type", type}, {"message", *message}}}});
}

std::string AnthropicErrorBody(const ApiError& error) {
  json body = {{"type", "error"},
               {"error", {{"type", AnthropicErrorType(error.kind)}, {"message", error.message}}}};
  return Dump(body);
}

}  // namespace prefixd::server
