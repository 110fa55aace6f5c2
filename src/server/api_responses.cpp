#include "server/api_responses.h"

#include "server/api_json.h"
#include "server/image_part.h"

namespace prefixd::server {
namespace {

using namespace api_json;

// ---------------------------------------------------------------------------------------------
// Request: Responses body -> chat completions body.

// The text of a content array's parts of the allowed types, or an error naming the part.
// `kinds` lists the accepted part types; every accepted part carries a string "text" (a
// "refusal" part carries "refusal").
MaybeError ReadTextParts(const json& content, const std::string& path,
                         std::initializer_list<const char*> kinds, std::vector<std::string>* out) {
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string where = Index(path, i);
    if (!part.is_object()) return WrongType(where, "an object", part);
    std::string type;
    if (auto e = GetString(part, where, "type", true, &type)) return e;
    bool known = false;
    for (const char* k : kinds) known = known || type == k;
    if (!known) {
      std::string list;
      for (const char* k : kinds) list += (list.empty() ? "" : ", ") + std::string(k);
      return Unsupported(Join(where, "type"), "content part type '" + type + "' (only " + list +
                                                  ")");
    }
    std::string text;
    const char* key = type == "refusal" ? "refusal" : "text";
    if (auto e = GetString(part, where, key, true, &text)) return e;
    out->push_back(std::move(text));
  }
  return std::nullopt;
}

// One chat content value from text pieces: a string for one piece, else text parts.
json ChatContent(const std::vector<std::string>& texts) {
  if (texts.size() == 1) return texts[0];
  json parts = json::array();
  for (const std::string& t : texts) parts.push_back({{"type", "text"}, {"text", t}});
  return parts;
}

// An input_image part as a chat image part (image_part.h reads and checks the image).
MaybeError InputImage(const json& part, const std::string& where, json* out) {
  std::string url, file_id;
  if (auto e = GetString(part, where, "image_url", false, &url)) return e;
  if (auto e = GetString(part, where, "file_id", false, &file_id)) return e;
  if (url.empty() && !file_id.empty()) {
    const std::string fpath = Join(where, "file_id");
    return ApiError::Invalid(fpath + ": an image by file_id: this server keeps no files; send "
                                     "image_url as a data URL (data:image/png;base64,...)",
                             fpath);
  }
  if (url.empty()) {
    return ApiError::Invalid("'" + Join(where, "image_url") + "' is required",
                             Join(where, "image_url"));
  }
  *out = ChatImagePart<json>(std::move(url), Join(where, "image_url"));
  return std::nullopt;
}

// The chat parts of a content array of input_text and input_image parts, in order.
MaybeError ReadInputParts(const json& content, const std::string& path, json* parts) {
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string where = Index(path, i), type, text;
    if (!part.is_object()) return WrongType(where, "an object", part);
    if (auto e = GetString(part, where, "type", true, &type)) return e;
    if (type == "input_image") {
      json image;
      if (auto e = InputImage(part, where, &image)) return e;
      parts->push_back(std::move(image));
      continue;
    }
    if (type != "input_text") {
      return Unsupported(Join(where, "type"), "content part type '" + type +
                                                  "' (only input_text, input_image)");
    }
    if (auto e = GetString(part, where, "text", true, &text)) return e;
    parts->push_back({{"type", "text"}, {"text", std::move(text)}});
  }
  return std::nullopt;
}

// The texts of chat parts, when none is an image; else nullopt.
std::optional<std::vector<std::string>> OnlyTexts(const json& parts) {
  std::vector<std::string> texts;
  for (const json& p : parts) {
    if (p["type"] != "text") return std::nullopt;
    texts.push_back(p["text"].get<std::string>());
  }
  return texts;
}

// Appends the texts to *out. Merging items appends in place: re-copying the growing text for
// each item would cost the square of a turn's size.
void AppendTexts(const std::vector<std::string>& texts, std::string* out) {
  for (const std::string& t : texts) *out += t;
}

std::string Concat(const std::vector<std::string>& texts) {
  std::string s;
  AppendTexts(texts, &s);
  return s;
}

// Builds the chat messages from the input items, merging the items of one assistant turn
// (reasoning, message, function calls) into one assistant message.
class InputConverter {
 public:
  json messages = json::array();

  MaybeError AddItem(const json& item, const std::string& path) {
    if (!item.is_object()) return WrongType(path, "an object", item);
    std::string type = "message";
    if (auto e = GetString(item, path, "type", false, &type)) return e;
    if (type == "message") return AddMessage(item, path);
    if (type == "function_call") return AddFunctionCall(item, path);
    if (type == "function_call_output") return AddFunctionOutput(item, path);
    if (type == "reasoning") return AddReasoning(item, path);
    if (type == "item_reference") {
      return Unsupported(Join(path, "type"), "'item_reference' (the server keeps no items)");
    }
    return Unsupported(Join(path, "type"), "input item type '" + type + "'");
  }

 private:
  MaybeError AddMessage(const json& item, const std::string& path) {
    std::string role;
    if (auto e = GetString(item, path, "role", true, &role)) return e;
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      return ApiError::Invalid("'" + Join(path, "role") + "' must be one of user, system, "
                               "developer, assistant, got '" + role + "'",
                               Join(path, "role"));
    }
    std::string cpath = Join(path, "content");
    const json* c = Field(item, "content");
    if (!c) return ApiError::Invalid("'" + cpath + "' is required", cpath);
    std::vector<std::string> texts;
    if (c->is_string()) {
      texts.push_back(c->get<std::string>());
    } else if (!c->is_array()) {
      return WrongType(cpath, "a string or an array of content parts", *c);
    } else if (role == "assistant") {
      if (auto e = ReadTextParts(*c, cpath, {"output_text", "input_text", "refusal"}, &texts)) return e;
    } else if (role == "user") {
      return AddUserParts(*c, cpath);
    } else {
      if (auto e = ReadTextParts(*c, cpath, {"input_text"}, &texts)) return e;
    }
    if (role != "assistant") {
      messages.push_back({{"role", role}, {"content", ChatContent(texts)}});
      return std::nullopt;
    }
    json& m = OpenAssistant(/*for_content=*/true);
    AppendTexts(texts, &m["content"].get_ref<std::string&>());  // in place: one turn's items
    return std::nullopt;
  }

  // A user message's content array: its texts as before, or text and image parts in order.
  MaybeError AddUserParts(const json& content, const std::string& path) {
    json parts = json::array();
    if (auto e = ReadInputParts(content, path, &parts)) return e;
    std::optional<std::vector<std::string>> texts = OnlyTexts(parts);
    messages.push_back({{"role", "user"}, {"content", texts ? ChatContent(*texts) : parts}});
    return std::nullopt;
  }

  MaybeError AddFunctionCall(const json& item, const std::string& path) {
    std::string call_id, name, arguments;
    if (auto e = GetString(item, path, "call_id", true, &call_id)) return e;
    if (auto e = GetString(item, path, "name", true, &name)) return e;
    if (auto e = GetString(item, path, "arguments", true, &arguments)) return e;
    std::string ns;
    if (auto e = GetString(item, path, "namespace", false, &ns)) return e;
    if (!ns.empty()) name = ns + "." + name;  // as ConvertTools named it
    json& m = OpenAssistant(/*for_content=*/false);
    if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
    m["tool_calls"].push_back({{"id", call_id},
                               {"type", "function"},
                               {"function", {{"name", name}, {"arguments", arguments}}}});
    return std::nullopt;
  }

  MaybeError AddFunctionOutput(const json& item, const std::string& path) {
    std::string call_id;
    if (auto e = GetString(item, path, "call_id", true, &call_id)) return e;
    std::string opath = Join(path, "output");
    const json* o = Field(item, "output");
    if (!o) return ApiError::Invalid("'" + opath + "' is required", opath);
    json content;
    if (o->is_string()) {
      content = *o;
    } else if (o->is_array()) {
      json parts = json::array();
      if (auto e = ReadInputParts(*o, opath, &parts)) return e;
      std::optional<std::vector<std::string>> texts = OnlyTexts(parts);
      content = texts ? json(Concat(*texts)) : std::move(parts);
    } else {
      return WrongType(opath, "a string or an array of input_text and input_image parts", *o);
    }
    messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(content)}});
    return std::nullopt;
  }

  // The reasoning text: the reasoning_text content parts, else the summary texts.
  MaybeError AddReasoning(const json& item, const std::string& path) {
    std::vector<std::string> texts;
    const json* c = Field(item, "content");
    const json* s = Field(item, "summary");
    if (c && !c->is_array()) return WrongType(Join(path, "content"), "an array", *c);
    if (s && !s->is_array()) return WrongType(Join(path, "summary"), "an array", *s);
    if (c && !c->empty()) {
      if (auto e = ReadTextParts(*c, Join(path, "content"), {"reasoning_text"}, &texts)) return e;
    } else if (s) {
      if (auto e = ReadTextParts(*s, Join(path, "summary"), {"summary_text"}, &texts)) return e;
    }
    std::string text = Concat(texts);
    if (text.empty()) return std::nullopt;  // encrypted only: nothing a local model can read
    json& m = OpenAssistant(/*for_content=*/false);
    if (!m["content"].get_ref<const std::string&>().empty() || m.contains("tool_calls")) {
      messages.push_back(NewAssistant());  // reasoning opens a turn
    }
    json& open = messages.back();
    if (!open.contains("reasoning_content")) open["reasoning_content"] = "";
    open["reasoning_content"].get_ref<std::string&>() += text;  // in place, as the content
    return std::nullopt;
  }

  static json NewAssistant() { return {{"role", "assistant"}, {"content", ""}}; }

  // The assistant message the next assistant item belongs to: the last message when it is an
  // assistant message (text after a tool call opens a new one), else a new one.
  json& OpenAssistant(bool for_content) {
    bool open = !messages.empty() && messages.back()["role"] == "assistant" &&
                !(for_content && messages.back().contains("tool_calls"));
    if (!open) messages.push_back(NewAssistant());
    return messages.back();
  }
};

MaybeError ConvertInput(const json& req, json* chat) {
  InputConverter conv;
  std::string instructions;
  if (auto e = GetString(req, "", "instructions", false, &instructions)) return e;
  if (!instructions.empty()) conv.messages.push_back({{"role", "system"}, {"content", instructions}});
  const json* input = Field(req, "input");
  if (!input) return ApiError::Invalid("'input' is required", "input");
  if (input->is_string()) {
    conv.messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      if (auto e = conv.AddItem((*input)[i], Index("input", i))) return e;
    }
  } else {
    return WrongType("input", "a string or an array of input items", *input);
  }
  (*chat)["messages"] = std::move(conv.messages);
  return std::nullopt;
}

// One function tool as a chat tool, named `prefix` + its name.
MaybeError FunctionTool(const json& t, const std::string& path, const std::string& prefix,
                        json* out) {
  std::string name, description;
  if (auto e = GetString(t, path, "name", true, &name)) return e;
  if (auto e = GetString(t, path, "description", false, &description)) return e;
  json fn = {{"name", prefix + name}};
  if (!description.empty()) fn["description"] = description;
  if (const json* p = Field(t, "parameters")) {
    if (!p->is_object()) return WrongType(Join(path, "parameters"), "an object", *p);
    fn["parameters"] = *p;
  }
  out->push_back({{"type", "function"}, {"function", std::move(fn)}});
  return std::nullopt;
}

// The function tools of a namespace (Codex's multi_agent_v1), each as "NAMESPACE.NAME": a dot
// is no function name's, so a call splits back unambiguously (CallItem).
MaybeError NamespaceTools(const json& t, const std::string& path, json* out) {
  std::string ns;
  if (auto e = GetString(t, path, "name", true, &ns)) return e;
  const json* inner = Field(t, "tools");
  if (!inner) return std::nullopt;
  if (!inner->is_array()) return WrongType(Join(path, "tools"), "an array", *inner);
  for (size_t i = 0; i < inner->size(); ++i) {
    const json& f = (*inner)[i];
    const std::string fpath = Index(Join(path, "tools"), i);
    if (!f.is_object()) return WrongType(fpath, "an object", f);
    if (f.value("type", "function") != "function") continue;
    if (auto e = FunctionTool(f, fpath, ns + ".", out)) return e;
  }
  return std::nullopt;
}

// Function tools become chat tools, a namespace's too; tools that run on OpenAI's side
// (web_search, file_search, code_interpreter, ...) have no meaning here and are skipped.
MaybeError ConvertTools(const json& req, json* chat) {
  const json* tools = Field(req, "tools");
  if (!tools) return std::nullopt;
  if (!tools->is_array()) return WrongType("tools", "an array", *tools);
  json out = json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    std::string path = Index("tools", i), type;
    if (!t.is_object()) return WrongType(path, "an object", t);
    if (auto e = GetString(t, path, "type", true, &type)) return e;
    if (type == "function") {
      if (auto e = FunctionTool(t, path, "", &out)) return e;
    } else if (type == "namespace") {
      if (auto e = NamespaceTools(t, path, &out)) return e;
    }
  }
  if (!out.empty()) (*chat)["tools"] = std::move(out);
  return std::nullopt;
}

MaybeError ConvertToolChoice(const json& req, json* chat) {
  const json* tc = Field(req, "tool_choice");
  if (!tc) return std::nullopt;
  if (tc->is_string()) {
    (*chat)["tool_choice"] = *tc;  // auto, none, required: checked by the chat path
    return std::nullopt;
  }
  if (!tc->is_object()) return WrongType("tool_choice", "a string or an object", *tc);
  std::string type, name;
  if (auto e = GetString(*tc, "tool_choice", "type", true, &type)) return e;
  if (type != "function") return Unsupported("tool_choice.type", "tool_choice type '" + type + "'");
  if (auto e = GetString(*tc, "tool_choice", "name", true, &name)) return e;
  (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  return std::nullopt;
}

// text.format -> response_format.
MaybeError ConvertTextFormat(const json& req, json* chat) {
  const json* text = Field(req, "text");
  if (!text) return std::nullopt;
  if (!text->is_object()) return WrongType("text", "an object", *text);
  const json* f = Field(*text, "format");
  if (!f) return std::nullopt;
  if (!f->is_object()) return WrongType("text.format", "an object", *f);
  std::string type;
  if (auto e = GetString(*f, "text.format", "type", true, &type)) return e;
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    (*chat)["response_format"] = {{"type", "json_object"}};
    return std::nullopt;
  }
  if (type != "json_schema") return Unsupported("text.format.type", "text.format type '" + type + "'");
  json schema = {{"name", f->value("name", "response")}};
  for (const char* key : {"schema", "description", "strict"}) {
    if (const json* v = Field(*f, key)) schema[key] = *v;
  }
  (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  return std::nullopt;
}

// What this stateless server cannot do.
MaybeError RefuseStateful(const json& req) {
  if (const json* s = Field(req, "store"); s && !s->is_boolean()) {
    return WrongType("store", "a boolean", *s);
  }
  if (Field(req, "previous_response_id")) {
    return Unsupported("previous_response_id",
                       "'previous_response_id' (the server keeps no responses; send the whole "
                       "conversation in 'input')");
  }
  if (Field(req, "conversation")) {
    return Unsupported("conversation", "'conversation' (the server keeps no conversations)");
  }
  if (const json* b = Field(req, "background"); b && *b != false) {
    return Unsupported("background", "'background' mode");
  }
  if (Field(req, "prompt")) return Unsupported("prompt", "a stored prompt template ('prompt')");
  return std::nullopt;
}

MaybeError ConvertParams(const json& req, json* chat) {
  for (const char* key : {"model", "temperature", "top_p", "parallel_tool_calls"}) {
    if (const json* v = Field(req, key)) (*chat)[key] = *v;
  }
  CopyChatExtensions(req, chat);
  if (const json* v = Field(req, "max_output_tokens")) (*chat)["max_tokens"] = *v;
  if (const json* r = Field(req, "reasoning")) {
    if (!r->is_object()) return WrongType("reasoning", "an object", *r);
    if (const json* effort = Field(*r, "effort")) (*chat)["reasoning_effort"] = *effort;
  }
  if (const json* s = Field(req, "stream")) {
    (*chat)["stream"] = *s;
    if (*s == true) (*chat)["stream_options"] = {{"include_usage", true}};
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Response: chat answer -> Response object and events.

struct Ids {
  std::string response, message, reasoning;
  explicit Ids(const std::string& chat_id) {
    std::string s = IdSuffix(chat_id);
    response = "resp_" + s;
    message = "msg_" + s;
    reasoning = "rs_" + s;
  }
};

json ReasoningItem(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"id", id}, {"type", "reasoning"}, {"summary", json::array()},
          {"content", std::move(content)}, {"status", status}};
}

json OutputText(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()},
          {"logprobs", json::array()}};
}

json MessageItem(const std::string& id, const std::string* text, const char* status) {
  json content = json::array();
  if (text) content.push_back(OutputText(*text));
  return {{"id", id}, {"type", "message"}, {"role", "assistant"}, {"status", status},
          {"content", std::move(content)}};
}

// A call of a tool inside a namespace went to the template as "NAMESPACE.NAME" (ConvertTools;
// function names cannot hold a dot): it goes back as the name and its namespace.
json CallItem(const std::string& call_id, const std::string& name, const std::string& args,
              const char* status) {
  json item = {{"id", "fc_" + call_id}, {"type", "function_call"}, {"status", status},
               {"call_id", call_id},    {"name", name},            {"arguments", args}};
  if (const size_t dot = name.find('.'); dot != std::string::npos && dot > 0) {
    item["namespace"] = name.substr(0, dot);
    item["name"] = name.substr(dot + 1);
  }
  return item;
}

json UsageJson(const ChatUsage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// The Response object around `output`. finish_reason "" means still in progress.
json ResponseObject(const Ids& ids, int64_t created, const std::string& model, json output,
                    const std::string& finish_reason, const ChatUsage* usage) {
  bool incomplete = finish_reason == "length";
  const char* status = finish_reason.empty() ? "in_progress" : incomplete ? "incomplete" : "completed";
  json r = {{"id", ids.response},
            {"object", "response"},
            {"created_at", created},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", model},
            {"output", std::move(output)},
            {"parallel_tool_calls", true},
            {"store", false},
            {"usage", usage ? UsageJson(*usage) : json()}};
  if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return r;
}

json OutputOf(const ChatAnswer& a, const Ids& ids) {
  json out = json::array();
  if (!a.reasoning.empty()) out.push_back(ReasoningItem(ids.reasoning, a.reasoning, "completed"));
  if (!a.content.empty() || (a.reasoning.empty() && a.tool_calls.empty())) {
    out.push_back(MessageItem(ids.message, &a.content, "completed"));
  }
  for (const ToolCallPiece& c : a.tool_calls) {
    out.push_back(CallItem(c.id, c.name, c.arguments, "completed"));
  }
  if (a.finish_reason == "length") out.back()["status"] = "incomplete";  // cut short
  return out;
}

// The Responses event stream, built from chat chunks. Output items open and close in order:
// at most one is open at a time (reasoning, then the message, then each function call).
class ResponsesStream : public ApiStream {
 public:
  explicit ResponsesStream(StreamStart start) : start_(std::move(start)), ids_("") {}

  std::string OnChunk(const std::string& chunk_json) override {
    ChatChunk c = ReadChatChunk(chunk_json);
    std::string out = Begin(c.id, c.created);
    if (!c.reasoning.empty()) out += Piece(Kind::kReasoning, c.reasoning);
    if (!c.content.empty()) out += Piece(Kind::kMessage, c.content);
    for (const ToolCallPiece& p : c.tool_calls) out += CallPiece(p);
    if (!c.finish_reason.empty()) finish_reason_ = c.finish_reason;
    if (c.has_usage) usage_ = c.usage;
    return out;
  }

  std::string OnEnd(const AnswerEnd&) override {
    std::string out = Begin("", 0);
    out += Close();
    if (finish_reason_.empty()) finish_reason_ = "stop";
    if (output_.empty()) {  // nothing was generated: an empty message, as the final body has
      std::string empty;
      out += Event("response.output_item.added",
                   {{"output_index", 0}, {"item", MessageItem(ids_.message, nullptr, "in_progress")}});
      output_.push_back(MessageItem(ids_.message, &empty, "completed"));
      out += Event("response.output_item.done", {{"output_index", 0}, {"item", output_.back()}});
    }
    const char* type = finish_reason_ == "length" ? "response.incomplete" : "response.completed";
    return out + Event(type, {{"response", Response(finish_reason_, &usage_)}});
  }

  std::string OnError(const ApiError& error) override {
    std::string out = Begin("", 0);
    out += Close();
    json r = Response("stop", nullptr);
    r["status"] = "failed";
    r["error"] = {{"code", error.code.empty() ? ErrorTypeOf(error.kind) : error.code},
                  {"message", error.message}};
    return out + Event("response.failed", {{"response", std::move(r)}});
  }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };

  json Response(const std::string& finish_reason, const ChatUsage* usage) const {
    return ResponseObject(ids_, created_, start_.model, output_, finish_reason, usage);
  }

  std::string Event(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return NamedEvent(type, data);
  }

  std::string Begin(const std::string& chat_id, int64_t created) {
    if (started_) return "";
    started_ = true;
    ids_ = Ids(chat_id.empty() ? "x-000000000000000000000000" : chat_id);
    created_ = created;
    json r = Response("", nullptr);
    std::string out = Event("response.created", {{"response", r}});
    return out + Event("response.in_progress", {{"response", r}});
  }

  int OutputIndex() const { return int(output_.size()); }

  // Text into the open reasoning or message item, opening it first.
  std::string Piece(Kind kind, const std::string& text) {
    std::string out;
    if (open_ != kind) {
      out += Close();  // before Open(): it closes the block Open() replaces
      out += Open(kind, nullptr);
    }
    text_ += text;
    const char* type = kind == Kind::kMessage ? "response.output_text.delta"
                                              : "response.reasoning_text.delta";
    json e = {{"item_id", ItemId()}, {"output_index", OutputIndex()}, {"content_index", 0},
              {"delta", text}};
    if (kind == Kind::kMessage) e["logprobs"] = json::array();
    return out + Event(type, std::move(e));
  }

  std::string CallPiece(const ToolCallPiece& p) {
    std::string out;
    if (open_ != Kind::kCall || p.index != call_index_) {
      out += Close();  // before Open(): it closes the block Open() replaces
      out += Open(Kind::kCall, &p);
    }
    if (p.arguments.empty()) return out;
    text_ += p.arguments;
    return out + Event("response.function_call_arguments.delta",
                       {{"item_id", ItemId()}, {"output_index", OutputIndex()},
                        {"delta", p.arguments}});
  }

  std::string ItemId() const {
    if (open_ == Kind::kReasoning) return ids_.reasoning;
    if (open_ == Kind::kMessage) return ids_.message;
    return "fc_" + call_id_;
  }

  std::string Open(Kind kind, const ToolCallPiece* call) {
    open_ = kind;
    text_.clear();
    json item;
    if (kind == Kind::kReasoning) item = ReasoningItem(ids_.reasoning, "", "in_progress");
    if (kind == Kind::kMessage) item = MessageItem(ids_.message, nullptr, "in_progress");
    if (kind == Kind::kCall) {
      call_index_ = call->index;
      call_id_ = call->id.empty() ? ids_.message + "_" + std::to_string(call->index) : call->id;
      call_name_ = call->name;
      item = CallItem(call_id_, call_name_, "", "in_progress");
    }
    std::string out =
        Event("response.output_item.added", {{"output_index", OutputIndex()}, {"item", item}});
    if (kind == Kind::kMessage) {
      out += Event("response.content_part.added",
                   {{"item_id", ids_.message}, {"output_index", OutputIndex()},
                    {"content_index", 0}, {"part", OutputText("")}});
    }
    return out;
  }

  // Closes the open item: its .done events, then output_item.done; the item joins output_.
  std::string Close() {
    if (open_ == Kind::kNone) return "";
    json at = {{"item_id", ItemId()}, {"output_index", OutputIndex()}};
    std::string out;
    json item;
    // Only the item open at the end can have been cut short by max_output_tokens.
    const char* status = finish_reason_ == "length" ? "incomplete" : "completed";
    if (open_ == Kind::kReasoning) {
      json e = at;
      e["content_index"] = 0;
      e["text"] = text_;
      out += Event("response.reasoning_text.done", std::move(e));
      item = ReasoningItem(ids_.reasoning, text_, status);
    } else if (open_ == Kind::kMessage) {
      json e = at;
      e["content_index"] = 0;
      e["text"] = text_;
      e["logprobs"] = json::array();
      out += Event("response.output_text.done", e);
      e.erase("text");
      e.erase("logprobs");
      e["part"] = OutputText(text_);
      out += Event("response.content_part.done", std::move(e));
      item = MessageItem(ids_.message, &text_, status);
    } else {
      json e = at;
      e["arguments"] = text_;
      e["name"] = call_name_;
      out += Event("response.function_call_arguments.done", std::move(e));
      item = CallItem(call_id_, call_name_, text_, status);
    }
    out += Event("response.output_item.done", {{"output_index", OutputIndex()}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = Kind::kNone;
    return out;
  }

  StreamStart start_;
  Ids ids_;
  int64_t created_ = 0;
  bool started_ = false;
  int64_t seq_ = 0;
  Kind open_ = Kind::kNone;
  std::string text_;  // the open item's text or arguments so far
  int call_index_ = -1;
  std::string call_id_, call_name_;
  json output_ = json::array();  // the closed items
  std::string finish_reason_;
  ChatUsage usage_;
};

class ResponsesAdapter : public ApiAdapter {
 public:
  std::string FinalBody(const std::string& chat_json, const AnswerEnd&) const override {
    ChatAnswer a = ReadChatAnswer(chat_json);
    Ids ids(a.id);
    json r = ResponseObject(ids, a.created, a.model, OutputOf(a, ids),
                            a.finish_reason.empty() ? "stop" : a.finish_reason, &a.usage);
    if (!a.timings.is_null()) r["timings"] = a.timings;
    return Dump(r);
  }

  // The OpenAI error shape, with the chat path's parameter names put back as this API names
  // them.
  std::string ErrorBody(const ApiError& error) const override {
    ApiError e = error;
    static const std::pair<const char*, const char*> kNames[] = {
        {"max_tokens", "max_output_tokens"}, {"messages", "input"},
        {"response_format", "text.format"}, {"reasoning_effort", "reasoning.effort"}};
    for (const auto& [chat, api] : kNames) {
      if (e.param == chat) e.param = api;
      std::string quoted = std::string("'") + chat + "'";
      if (size_t at = e.message.find(quoted); at != std::string::npos) {
        e.message.replace(at, quoted.size(), std::string("'") + api + "'");
      }
    }
    return server::ErrorBody(e);
  }

  std::unique_ptr<ApiStream> NewStream(const StreamStart& start) const override {
    return std::make_unique<ResponsesStream>(start);
  }
};

}  // namespace

std::optional<ApiError> ResponsesToChat(const std::string& body, std::string* chat_body) {
  json req;
  if (auto e = ParseRequestObject(body, &req)) return e;
  if (auto e = RefuseStateful(req)) return e;
  json chat = json::object();
  if (auto e = ConvertInput(req, &chat)) return e;
  if (auto e = ConvertTools(req, &chat)) return e;
  if (auto e = ConvertToolChoice(req, &chat)) return e;
  if (auto e = ConvertTextFormat(req, &chat)) return e;
  if (auto e = ConvertParams(req, &chat)) return e;
  *chat_body = Dump(chat);
  return std::nullopt;
}

std::unique_ptr<ApiAdapter> NewResponsesAdapter() { return std::make_unique<ResponsesAdapter>(); }

}  // namespace prefixd::server
