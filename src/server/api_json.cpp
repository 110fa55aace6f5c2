#include "server/api_json.h"

namespace prefixd::server::api_json {
namespace {

constexpr int kMaxDepth = kMaxRequestDepth;

std::string StringAt(const json& obj, const char* key) {
  const json* f = Field(obj, key);
  return f && f->is_string() ? f->get<std::string>() : std::string();
}

int64_t IntAt(const json& obj, const char* key) {
  const json* f = Field(obj, key);
  return f && f->is_number() ? f->get<int64_t>() : 0;
}

ChatUsage ReadUsage(const json& u) {
  ChatUsage out;
  out.prompt_tokens = IntAt(u, "prompt_tokens");
  out.completion_tokens = IntAt(u, "completion_tokens");
  if (const json* d = Field(u, "prompt_tokens_details")) out.cached_tokens = IntAt(*d, "cached_tokens");
  return out;
}

std::vector<ToolCallPiece> ReadToolCalls(const json& holder) {
  std::vector<ToolCallPiece> out;
  const json* calls = Field(holder, "tool_calls");
  if (!calls || !calls->is_array()) return out;
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& c = (*calls)[i];
    ToolCallPiece p;
    p.index = Field(c, "index") ? int(IntAt(c, "index")) : int(i);
    p.id = StringAt(c, "id");
    if (const json* fn = Field(c, "function")) {
      p.name = StringAt(*fn, "name");
      p.arguments = StringAt(*fn, "arguments");
    }
    out.push_back(std::move(p));
  }
  return out;
}

const json& FirstChoice(const json& body) {
  static const json kEmpty = json::object();
  const json* choices = Field(body, "choices");
  return choices && choices->is_array() && !choices->empty() ? (*choices)[0] : kEmpty;
}

}  // namespace

ChatAnswer ReadChatAnswer(const std::string& chat_json) {
  json body = json::parse(chat_json, nullptr, false);
  ChatAnswer a;
  a.id = StringAt(body, "id");
  a.created = IntAt(body, "created");
  a.model = StringAt(body, "model");
  const json& choice = FirstChoice(body);
  a.finish_reason = StringAt(choice, "finish_reason");
  if (const json* m = Field(choice, "message")) {
    a.reasoning = StringAt(*m, "reasoning_content");
    a.content = StringAt(*m, "content");
    a.tool_calls = ReadToolCalls(*m);
  }
  if (const json* u = Field(body, "usage")) a.usage = ReadUsage(*u);
  if (const json* t = Field(body, "timings")) a.timings = *t;
  return a;
}

ChatChunk ReadChatChunk(const std::string& chunk_json) {
  json body = json::parse(chunk_json, nullptr, false);
  ChatChunk c;
  c.id = StringAt(body, "id");
  c.created = IntAt(body, "created");
  const json& choice = FirstChoice(body);
  c.finish_reason = StringAt(choice, "finish_reason");
  if (const json* d = Field(choice, "delta")) {
    c.reasoning = StringAt(*d, "reasoning_content");
    c.content = StringAt(*d, "content");
    c.tool_calls = ReadToolCalls(*d);
  }
  if (const json* u = Field(body, "usage")) {
    c.has_usage = true;
    c.usage = ReadUsage(*u);
  }
  if (const json* t = Field(body, "timings")) c.timings = *t;
  return c;
}

bool DepthWithin(const std::string& body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

MaybeError ParseRequestObject(const std::string& body, json* out) {
  if (!DepthWithin(body, kMaxDepth)) {
    return ApiError::Invalid("request body nests deeper than " + std::to_string(kMaxDepth));
  }
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return ApiError::Invalid("request body is not valid JSON");
  if (!out->is_object()) return ApiError::Invalid("request body must be a JSON object");
  return std::nullopt;
}

const json* Field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return (it == obj.end() || it->is_null()) ? nullptr : &*it;
}

ApiError WrongType(const std::string& path, const char* want, const json& got) {
  return ApiError::Invalid("'" + path + "' must be " + want + ", got " + got.type_name(), path);
}

ApiError Unsupported(const std::string& path, const std::string& what) {
  return ApiError::Invalid(what + " is not supported by this server", path);
}

std::string Join(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : path + "." + key;
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

MaybeError GetString(const json& obj, const std::string& path, const char* key, bool required,
                     std::string* out) {
  const json* f = Field(obj, key);
  if (!f) {
    if (!required) return std::nullopt;
    return ApiError::Invalid("'" + Join(path, key) + "' is required", Join(path, key));
  }
  if (!f->is_string()) return WrongType(Join(path, key), "a string", *f);
  *out = f->get<std::string>();
  return std::nullopt;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string IdSuffix(const std::string& chat_id) {
  size_t dash = chat_id.find('-');
  return dash == std::string::npos ? chat_id : chat_id.substr(dash + 1);
}

void CopyChatExtensions(const json& req, json* chat) {
  static const char* kKeys[] = {"top_k",           "seed",
                                "min_p",           "logit_bias",
                                "presence_penalty", "frequency_penalty",
                                "repetition_penalty", "repeat_penalty",
                                "chat_template_kwargs", "enable_thinking"};
  for (const char* key : kKeys) {
    if (const json* v = Field(req, key)) (*chat)[key] = *v;
  }
}

std::string NamedEvent(const std::string& name, const json& data) {
  return "event: " + name + "\ndata: " + Dump(data) + "\n\n";
}

}  // namespace prefixd::server::api_json
