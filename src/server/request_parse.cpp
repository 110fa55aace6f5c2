#include "server/request_parse.h"

#include "server/api_json.h"
#include "server/image_part.h"
#include "server/system_messages.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace prefixd::server {

using json = nlohmann::json;
using MaybeError = std::optional<ApiError>;

namespace {

constexpr int kMaxDepth = 64;       // deeper bodies are refused before parsing
constexpr size_t kMaxStops = 16;

MaybeError ParseObject(const std::string& body, json* out) {
  if (!api_json::DepthWithin(body, kMaxDepth)) {
    return ApiError::Invalid("request body nests deeper than " + std::to_string(kMaxDepth));
  }
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    return ApiError::Invalid("request body is not valid JSON");
  }
  if (!out->is_object()) return ApiError::Invalid("request body must be a JSON object");
  return std::nullopt;
}

// A field that is absent or null counts as not given.
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return (it == obj.end() || it->is_null()) ? nullptr : &*it;
}

std::string TypeName(const json& j) { return j.type_name(); }

MaybeError WrongType(const char* key, const char* want, const json& got) {
  return ApiError::Invalid(std::string("'") + key + "' must be " + want + ", got " +
                               TypeName(got),
                           key);
}

MaybeError GetBool(const json& obj, const char* key, bool* out) {
  const json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) return WrongType(key, "a boolean", *f);
  *out = f->get<bool>();
  return std::nullopt;
}

MaybeError GetString(const json& obj, const char* key, std::string* out) {
  const json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (!f->is_string()) return WrongType(key, "a string", *f);
  *out = f->get<std::string>();
  return std::nullopt;
}

MaybeError GetNumber(const json& obj, const char* key, double lo, double hi, double* out) {
  const json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (!f->is_number()) return WrongType(key, "a number", *f);
  double v = f->get<double>();
  if (!(v >= lo && v <= hi)) {
    return ApiError::Invalid(std::string("'") + key + "' must be between " +
                                 json(lo).dump() + " and " + json(hi).dump() + ", got " +
                                 f->dump(),
                             key);
  }
  *out = v;
  return std::nullopt;
}

MaybeError GetInt(const json& obj, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  const json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (!f->is_number_integer()) return WrongType(key, "an integer", *f);
  bool too_big = f->is_number_unsigned() && f->get<uint64_t>() > uint64_t(INT64_MAX);
  int64_t v = too_big ? INT64_MAX : f->get<int64_t>();
  if (too_big || v < lo || v > hi) {
    return ApiError::Invalid(std::string("'") + key + "' must be between " +
                                 std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                                 f->dump(),
                             key);
  }
  *out = v;
  return std::nullopt;
}

MaybeError Unsupported(const char* key, const std::string& what) {
  return ApiError::Invalid(what + " is not supported by this server", key);
}

MaybeError ParseStop(const json& obj, std::vector<std::string>* out) {
  const json* f = Field(obj, "stop");
  if (!f) return std::nullopt;
  if (f->is_string()) {
    if (!f->get<std::string>().empty()) out->push_back(f->get<std::string>());
    return std::nullopt;
  }
  if (!f->is_array()) return WrongType("stop", "a string or an array of strings", *f);
  if (f->size() > kMaxStops) {
    return ApiError::Invalid("'stop' has more than " + std::to_string(kMaxStops) + " entries",
                             "stop");
  }
  for (const json& s : *f) {
    if (!s.is_string()) return WrongType("stop", "a string or an array of strings", s);
    if (!s.get<std::string>().empty()) out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

MaybeError ParseMaxTokens(const json& obj, const ParseLimits& limits, int* out) {
  int64_t v = -1;
  const char* key = Field(obj, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto e = GetInt(obj, key, 1, limits.max_tokens_limit, &v)) return e;
  *out = int(v);
  return std::nullopt;
}

MaybeError ParseStreaming(const json& obj, GenerationParams* p) {
  if (auto e = GetBool(obj, "stream", &p->stream)) return e;
  const json* so = Field(obj, "stream_options");
  if (!so) return std::nullopt;
  if (!p->stream) {
    return ApiError::Invalid("'stream_options' is only allowed when 'stream' is true",
                             "stream_options");
  }
  if (!so->is_object()) return WrongType("stream_options", "an object", *so);
  return GetBool(*so, "include_usage", &p->include_usage);
}

MaybeError ParsePenalties(const json& obj, engine::SamplingOptions* s) {
  if (auto e = GetNumber(obj, "presence_penalty", -2.0, 2.0, &s->presence_penalty)) return e;
  if (auto e = GetNumber(obj, "frequency_penalty", -2.0, 2.0, &s->frequency_penalty)) return e;
  const char* rp = Field(obj, "repetition_penalty") ? "repetition_penalty" : "repeat_penalty";
  if (auto e = GetNumber(obj, rp, 0.0, 10.0, &s->repetition_penalty)) return e;
  if (s->repetition_penalty <= 0.0) {
    return ApiError::Invalid(std::string("'") + rp + "' must be greater than 0", rp);
  }
  return GetNumber(obj, "min_p", 0.0, 1.0, &s->min_p);
}

// "logit_bias": {"<token id>": bias in [-100, 100], ...}; ids must be in the vocabulary.
MaybeError ParseLogitBias(const json& obj, const ParseLimits& limits, engine::SamplingOptions* s) {
  const json* f = Field(obj, "logit_bias");
  if (!f) return std::nullopt;
  if (!f->is_object()) return WrongType("logit_bias", "an object of token id -> bias", *f);
  for (const auto& [key, value] : f->items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id >= limits.vocab_hint) {
      return ApiError::Invalid("'logit_bias' key '" + key + "' is not a token id in [0, " +
                                   std::to_string(limits.vocab_hint) + ")",
                               "logit_bias");
    }
    if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100) {
      return ApiError::Invalid("'logit_bias' values must be numbers between -100 and 100",
                               "logit_bias");
    }
    s->logit_bias.emplace_back(engine::Token(id), value.get<float>());
  }
  return std::nullopt;
}

MaybeError ParseSampling(const json& obj, const ParseLimits& limits,
                         engine::SamplingOptions* s) {
  if (auto e = GetNumber(obj, "temperature", 0.0, 2.0, &s->temperature)) return e;
  if (auto e = GetNumber(obj, "top_p", 0.0, 1.0, &s->top_p)) return e;
  int64_t top_k = s->top_k, seed = int64_t(s->seed);
  if (auto e = GetInt(obj, "top_k", 0, 1 << 20, &top_k)) return e;
  if (auto e = GetInt(obj, "seed", INT64_MIN, INT64_MAX, &seed)) return e;
  if (auto e = GetBool(obj, "ignore_eos", &s->ignore_eos)) return e;
  // llama-server's names for the reasoning budget; -1: none.
  int64_t budget = s->reasoning_budget;
  const char* bk = Field(obj, "reasoning_budget_tokens") ? "reasoning_budget_tokens" : "thinking_budget_tokens";
  if (auto e = GetInt(obj, bk, -1, 1 << 24, &budget)) return e;
  s->reasoning_budget = int(budget);
  s->top_k = int(top_k);
  s->seed = uint64_t(seed);
  if (auto e = ParsePenalties(obj, s)) return e;
  return ParseLogitBias(obj, limits, s);
}

// llama-server's per-request speculation knobs. The rest of its "speculative.*" keys choose
// what the server sets up at start (the draft model, the n-gram pools), so they are refused.
MaybeError ParseSpeculation(const json& obj, GenerationParams* p) {
  int64_t n_max = p->spec_n_max, n_min = p->spec_n_min;
  if (auto e = GetInt(obj, "speculative.n_max", 0, 256, &n_max)) return e;
  if (auto e = GetInt(obj, "speculative.n_min", 0, 256, &n_min)) return e;
  if (obj.is_object()) {
    for (const auto& [key, value] : obj.items()) {
      if (key.starts_with("speculative") && key != "speculative.n_max" &&
          key != "speculative.n_min") {
        return Unsupported(key.c_str(), "'" + key + "' (speculation is set up at start: --spec-type "
                                "and the --spec-* flags; a request may set speculative.n_max "
                                "and speculative.n_min)");
      }
    }
  }
  p->spec_n_max = int(n_max);
  p->spec_n_min = int(n_min);
  return std::nullopt;
}

// Fields both endpoints share: model, n, max_tokens, sampling, stop, streaming, speculation.
MaybeError ParseGeneration(const json& obj, const ParseLimits& limits, GenerationParams* p) {
  if (auto e = GetString(obj, "model", &p->model)) return e;
  int64_t n = 1;
  if (auto e = GetInt(obj, "n", 1, 128, &n)) return e;
  if (n != 1) return Unsupported("n", "'n' other than 1");
  if (auto e = ParseMaxTokens(obj, limits, &p->max_tokens)) return e;
  if (auto e = ParseSampling(obj, limits, &p->sampling)) return e;
  if (auto e = ParseStop(obj, &p->stop)) return e;
  if (auto e = ParseSpeculation(obj, p)) return e;
  return ParseStreaming(obj, p);
}

// Image parts are counted into *n_images (image_part.h reads them); only user and tool
// messages may hold them (a tool message's do when an adapter translated a tool result).
MaybeError CheckContent(const json& msg, const std::string& where, size_t* n_images) {
  const json* c = Field(msg, "content");
  if (!c || c->is_string()) return std::nullopt;
  if (!c->is_array()) {
    return ApiError::Invalid(where + ".content must be a string, an array of parts or null",
                             "messages");
  }
  const bool images_allowed = msg["role"] == "user" || msg["role"] == "tool";
  for (size_t j = 0; j < c->size(); ++j) {
    const json& part = (*c)[j];
    if (part.is_object() && part.contains("type") && part["type"] == "image_url") {
      if (!images_allowed) {
        return ApiError::Invalid(where + ".content[" + std::to_string(j) +
                                     "]: image parts belong in user and tool messages",
                                 "messages");
      }
      ++*n_images;
      continue;
    }
    if (!part.is_object() || !part.contains("type") || part["type"] != "text") {
      return ApiError::Invalid(where + ".content: only parts of type 'text' and 'image_url' "
                                       "are supported",
                               "messages");
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return ApiError::Invalid(where + ".content: a text part needs a string 'text'",
                               "messages");
    }
  }
  return std::nullopt;
}

MaybeError CheckMessage(const json& msg, size_t i, size_t* n_images) {
  std::string where = "messages[" + std::to_string(i) + "]";
  if (!msg.is_object()) return ApiError::Invalid(where + " must be an object", "messages");
  auto role = msg.find("role");
  if (role == msg.end() || !role->is_string()) {
    return ApiError::Invalid(where + ".role must be a string", "messages");
  }
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  bool known = false;
  for (const char* r : kRoles) known = known || *role == r;
  if (!known) {
    return ApiError::Invalid(where + ".role '" + role->get<std::string>() +
                                 "' is not one of system, developer, user, assistant, tool",
                             "messages");
  }
  if (!msg.contains("content") && *role != "assistant") {
    return ApiError::Invalid(where + " has no 'content'", "messages");
  }
  if (const json* tc = Field(msg, "tool_calls"); tc && !tc->is_array()) {
    return ApiError::Invalid(where + ".tool_calls must be an array", "messages");
  }
  return CheckContent(msg, where, n_images);
}

// The messages, checked, their images as `images` says (image_part.h: each becomes its
// stand-in, or its marker with its file in *files, counted into *n_images), their system
// messages placed.
MaybeError ParseMessages(const json& obj, const ImageOptions& images, std::string* out,
                         size_t* n_images, std::vector<std::string>* files) {
  const json* m = Field(obj, "messages");
  if (!m) return ApiError::Invalid("'messages' is required", "messages");
  if (!m->is_array()) return WrongType("messages", "an array", *m);
  if (m->empty()) return ApiError::Invalid("'messages' must not be empty", "messages");
  size_t n_image_parts = 0;
  for (size_t i = 0; i < m->size(); ++i) {
    if (auto e = CheckMessage((*m)[i], i, &n_image_parts)) return e;
  }
  if (n_image_parts == 0) {
    *out = PlaceSystemMessages(*m).dump(-1, ' ', false, json::error_handler_t::replace);
    return std::nullopt;
  }
  json messages = *m;
  if (auto e = StandInImageParts(&messages, images, n_images, files)) return e;
  *out = PlaceSystemMessages(messages).dump(-1, ' ', false, json::error_handler_t::replace);
  return std::nullopt;
}

// Counts the JSON values under `j` into *nodes and finds the object with the most optional
// properties (those not in its "required").
void MeasureSchema(const json& j, size_t* nodes, size_t* max_optional) {
  ++*nodes;
  if (j.is_object()) {
    const auto props = j.find("properties");
    if (props != j.end() && props->is_object()) {
      size_t required = 0;
      const auto req = j.find("required");
      if (req != j.end() && req->is_array()) {
        for (const json& r : *req) required += r.is_string() && props->contains(r.get<std::string>());
      }
      *max_optional = std::max(*max_optional, props->size() - std::min(required, props->size()));
    }
    for (const auto& [key, value] : j.items()) MeasureSchema(value, nodes, max_optional);
  } else if (j.is_array()) {
    for (const json& v : j) MeasureSchema(v, nodes, max_optional);
  }
}

MaybeError CheckSchemaCost(const json& schema, const char* param, const std::string& what) {
  size_t nodes = 0, max_optional = 0;
  MeasureSchema(schema, &nodes, &max_optional);
  if (nodes > kMaxSchemaNodes) {
    return ApiError::Invalid(what + " has " + std::to_string(nodes) + " JSON values; at most " +
                                 std::to_string(kMaxSchemaNodes) + " are turned into a grammar",
                             param);
  }
  if (max_optional > kMaxOptionalProperties) {
    return ApiError::Invalid(what + " has an object of " + std::to_string(max_optional) +
                                 " optional properties; at most " +
                                 std::to_string(kMaxOptionalProperties) +
                                 " (the grammar's cost grows faster than their square): list "
                                 "more of them in 'required', or split the object",
                             param);
  }
  return std::nullopt;
}

MaybeError ParseTools(const json& obj, std::string* out) {
  const json* t = Field(obj, "tools");
  if (!t) return std::nullopt;
  if (!t->is_array()) return WrongType("tools", "an array", *t);
  for (const json& tool : *t) {
    const json* fn = tool.is_object() ? Field(tool, "function") : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string() ||
        (tool.contains("type") && tool["type"] != "function")) {
      return ApiError::Invalid("each tool must be {\"type\":\"function\",\"function\":{\"name\":...}}",
                               "tools");
    }
    const json* params = Field(*fn, "parameters");
    if (params && !params->is_object()) {
      return ApiError::Invalid("a tool's function.parameters must be a JSON schema object",
                               "tools");
    }
    if (params) {
      const std::string what = "tool '" + (*fn)["name"].get<std::string>() + "''s parameters";
      if (auto e = CheckSchemaCost(*params, "tools", what)) return e;
    }
  }
  if (!t->empty()) *out = t->dump(-1, ' ', false, json::error_handler_t::replace);
  if (out->size() > kMaxToolsBytes) {
    return ApiError::Invalid("the tools are " + std::to_string(out->size()) +
                                 " bytes of JSON; at most " + std::to_string(kMaxToolsBytes),
                             "tools");
  }
  return std::nullopt;
}

bool HasTool(const json& obj, const std::string& name) {
  const json* t = Field(obj, "tools");
  if (!t) return false;
  for (const json& tool : *t) {
    if (tool.at("function").at("name") == name) return true;  // ParseTools checked both
  }
  return false;
}

// "tool_choice": "auto" | "none" | "required" | {"type":"function","function":{"name":...}}.
MaybeError ParseToolChoice(const json& obj, engine::ChatRenderOptions* r) {
  if (auto e = GetBool(obj, "parallel_tool_calls", &r->parallel_tool_calls)) return e;
  const json* f = Field(obj, "tool_choice");
  if (!f) return std::nullopt;
  const char* kWant =
      "\"auto\", \"none\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}";
  if (f->is_string()) {
    const std::string v = f->get<std::string>();
    if (v == "auto") r->tool_choice = engine::ToolChoice::kAuto;
    else if (v == "none") r->tool_choice = engine::ToolChoice::kNone;
    else if (v == "required") r->tool_choice = engine::ToolChoice::kRequired;
    else return ApiError::Invalid(std::string("'tool_choice' must be ") + kWant, "tool_choice");
  } else {
    const json* fn = f->is_object() ? Field(*f, "function") : nullptr;
    const json* name = fn && fn->is_object() ? Field(*fn, "name") : nullptr;
    const json* type = f->is_object() ? Field(*f, "type") : nullptr;
    if (!name || !name->is_string() || !type || *type != "function") {
      return ApiError::Invalid(std::string("'tool_choice' must be ") + kWant, "tool_choice");
    }
    if (!HasTool(obj, name->get<std::string>())) {
      return ApiError::Invalid("'tool_choice' names function '" + name->get<std::string>() +
                                   "', which is not among the tools",
                               "tool_choice");
    }
    r->tool_name = name->get<std::string>();
  }
  if (r->tool_choice == engine::ToolChoice::kRequired && r->tools_json.empty()) {
    return ApiError::Invalid("'tool_choice' \"required\" needs 'tools'", "tool_choice");
  }
  return std::nullopt;
}

MaybeError ParseJsonSchemaFormat(const json& rf, std::string* schema) {
  const json* js = Field(rf, "json_schema");
  if (!js || !js->is_object()) {
    return ApiError::Invalid("response_format of type json_schema needs a 'json_schema' object",
                             "response_format");
  }
  const json* name = Field(*js, "name");
  if (name && !name->is_string()) return WrongType("response_format", "a string name", *name);
  const json* strict = Field(*js, "strict");
  if (strict && !strict->is_boolean()) return WrongType("response_format", "a boolean strict", *strict);
  const json* s = Field(*js, "schema");
  if (s && !s->is_object()) return WrongType("response_format", "an object schema", *s);
  json out = s ? *s : json::object();
  if (out.empty()) out["type"] = "object";  // no schema: any object
  if (auto e = CheckSchemaCost(out, "response_format", "the response_format's schema")) return e;
  *schema = out.dump();
  return std::nullopt;
}

// "response_format": {"type": "text" | "json_object" | "json_schema", ...}.
MaybeError ParseResponseFormat(const json& obj, std::string* schema) {
  const json* rf = Field(obj, "response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) return WrongType("response_format", "an object", *rf);
  const json* type = Field(*rf, "type");
  if (!type || !type->is_string()) {
    return ApiError::Invalid("'response_format.type' must be a string", "response_format");
  }
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") {
    *schema = R"({"type":"object"})";
    return std::nullopt;
  }
  if (*type == "json_schema") return ParseJsonSchemaFormat(*rf, schema);
  return ApiError::Invalid("'response_format.type' must be text, json_object or json_schema, got " +
                               type->dump(),
                           "response_format");
}

// chat_template_kwargs, enable_thinking and reasoning_effort, as llama-server combines them.
MaybeError ParseTemplateKwargs(const json& obj, engine::ChatRenderOptions* r) {
  if (const json* k = Field(obj, "chat_template_kwargs")) {
    if (!k->is_object()) return WrongType("chat_template_kwargs", "an object", *k);
    for (const auto& [key, value] : k->items()) {
      r->template_kwargs[key] = value.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    if (const json* et = Field(*k, "enable_thinking")) {
      if (!et->is_boolean()) return WrongType("chat_template_kwargs", "a boolean enable_thinking", *et);
      r->enable_thinking = et->get<bool>();
    }
  }
  if (auto e = GetBool(obj, "enable_thinking", &r->enable_thinking)) return e;
  std::string effort;
  if (auto e = GetString(obj, "reasoning_effort", &effort)) return e;
  if (effort.empty()) return std::nullopt;
  static const char* kEfforts[] = {"none", "minimal", "low", "medium", "high"};
  if (std::find(std::begin(kEfforts), std::end(kEfforts), effort) == std::end(kEfforts)) {
    return ApiError::Invalid("'reasoning_effort' must be none, minimal, low, medium or high",
                             "reasoning_effort");
  }
  if (effort == "none") {
    r->enable_thinking = false;
    r->template_kwargs.erase("reasoning_effort");
  } else {
    r->template_kwargs["reasoning_effort"] = json(effort).dump();
  }
  return std::nullopt;
}

// "logprobs": bool, "top_logprobs": 0..20 (needs logprobs).
MaybeError ParseLogprobs(const json& obj, ChatRequest* out) {
  if (auto e = GetBool(obj, "logprobs", &out->logprobs)) return e;
  int64_t top = 0;
  if (auto e = GetInt(obj, "top_logprobs", 0, 20, &top)) return e;
  if (Field(obj, "top_logprobs") && !out->logprobs) {
    return ApiError::Invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  }
  out->params.sampling.top_logprobs = out->logprobs ? int(top) : -1;
  if (out->logprobs && out->params.stream) {
    return Unsupported("logprobs", "'logprobs' with 'stream'");
  }
  return std::nullopt;
}

MaybeError ParseChatOnly(const json& obj, ChatRequest* out) {
  out->render.tools_json = out->tools_json;
  if (auto e = ParseToolChoice(obj, &out->render)) return e;
  if (auto e = ParseResponseFormat(obj, &out->render.json_schema)) return e;
  if (auto e = ParseTemplateKwargs(obj, &out->render)) return e;
  return ParseLogprobs(obj, out);
}

MaybeError ParseTokenArray(const json& arr, const ParseLimits& limits, const char* key,
                           std::vector<engine::Token>* out) {
  for (const json& t : arr) {
    if (!t.is_number_integer()) return WrongType(key, "an array of integer token ids", t);
    bool too_big = t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT64_MAX);
    int64_t id = too_big ? INT64_MAX : t.get<int64_t>();
    if (id < 0 || id >= limits.vocab_hint) {
      return ApiError::Invalid(std::string("'") + key + "' holds token id " + t.dump() +
                                   " outside the vocabulary [0, " +
                                   std::to_string(limits.vocab_hint) + ")",
                               key);
    }
    out->push_back(engine::Token(id));
  }
  return std::nullopt;
}

MaybeError ParsePrompt(const json& obj, const ParseLimits& limits, TextCompletionRequest* out) {
  const json* p = Field(obj, "prompt");
  if (!p) return ApiError::Invalid("'prompt' is required", "prompt");
  if (p->is_string()) {
    out->prompt = p->get<std::string>();
    return std::nullopt;
  }
  const char* kWant = "a string, an array of one string, or an array of token ids";
  if (!p->is_array() || p->empty()) return WrongType("prompt", kWant, *p);
  const json& first = (*p)[0];
  if (first.is_string() || first.is_array()) {
    if (p->size() != 1) return Unsupported("prompt", "a batch of several prompts");
    if (first.is_string()) {
      out->prompt = first.get<std::string>();
      return std::nullopt;
    }
    out->prompt_is_tokens = true;
    return ParseTokenArray(first, limits, "prompt", &out->prompt_tokens);
  }
  out->prompt_is_tokens = true;
  return ParseTokenArray(*p, limits, "prompt", &out->prompt_tokens);
}

MaybeError ParseCompletionOnly(const json& obj) {
  bool echo = false;
  if (auto e = GetBool(obj, "echo", &echo)) return e;
  if (echo) return Unsupported("echo", "'echo'");
  std::string suffix;
  if (auto e = GetString(obj, "suffix", &suffix)) return e;
  if (!suffix.empty()) return Unsupported("suffix", "'suffix'");
  if (Field(obj, "logprobs")) return Unsupported("logprobs", "'logprobs'");
  int64_t best_of = 1;
  if (auto e = GetInt(obj, "best_of", 1, 128, &best_of)) return e;
  if (best_of != 1) return Unsupported("best_of", "'best_of' other than 1");
  return std::nullopt;
}

}  // namespace

MaybeError ParseChatRequest(const std::string& body, const ParseLimits& limits,
                            ChatRequest* out) {
  json obj;
  if (auto e = ParseObject(body, &obj)) return e;
  if (auto e = ParseMessages(obj, limits.images, &out->messages_json, &out->n_images,
                             &out->render.images)) {
    return e;
  }
  if (auto e = ParseTools(obj, &out->tools_json)) return e;
  if (auto e = ParseGeneration(obj, limits, &out->params)) return e;
  return ParseChatOnly(obj, out);
}

MaybeError ParseTextCompletionRequest(const std::string& body, const ParseLimits& limits,
                                      TextCompletionRequest* out) {
  json obj;
  if (auto e = ParseObject(body, &obj)) return e;
  if (auto e = ParsePrompt(obj, limits, out)) return e;
  if (auto e = ParseCompletionOnly(obj)) return e;
  return ParseGeneration(obj, limits, &out->params);
}

MaybeError ParseTokenizeRequest(const std::string& body, TokenizeRequest* out) {
  json obj;
  if (auto e = ParseObject(body, &obj)) return e;
  const json* c = Field(obj, "content");
  if (!c) return ApiError::Invalid("'content' is required", "content");
  if (!c->is_string()) return WrongType("content", "a string", *c);
  out->content = c->get<std::string>();
  if (out->content.size() > kMaxTokenizeBytes) {
    return ApiError::Invalid("'content' is " + std::to_string(out->content.size()) +
                                 " bytes; /tokenize takes at most " +
                                 std::to_string(kMaxTokenizeBytes),
                             "content");
  }
  return GetBool(obj, "with_pieces", &out->with_pieces);
}

MaybeError ParseDetokenizeRequest(const std::string& body, std::vector<engine::Token>* out,
                                  const ParseLimits& limits) {
  json obj;
  if (auto e = ParseObject(body, &obj)) return e;
  const json* t = Field(obj, "tokens");
  if (!t) return ApiError::Invalid("'tokens' is required", "tokens");
  if (!t->is_array()) return WrongType("tokens", "an array of integer token ids", *t);
  return ParseTokenArray(*t, limits, "tokens", out);
}

MaybeError ParseWarmRequest(const std::string& body, WarmRequest* out,
                            const ImageOptions& images) {
  json obj;
  if (auto e = ParseObject(body, &obj)) return e;
  if (Field(obj, "messages")) {
    out->is_chat = true;
    if (auto e = ParseMessages(obj, images, &out->chat.messages_json, &out->chat.n_images,
                               &out->chat.render.images)) {
      return e;
    }
    if (auto e = ParseTools(obj, &out->chat.tools_json)) return e;
    engine::ChatRenderOptions& r = out->chat.render;
    r.tools_json = out->chat.tools_json;
    if (auto e = ParseToolChoice(obj, &r)) return e;
    if (auto e = ParseResponseFormat(obj, &r.json_schema)) return e;
    return ParseTemplateKwargs(obj, &r);
  }
  const json* p = Field(obj, "prompt");
  if (!p) return ApiError::Invalid("'messages' or 'prompt' is required", "messages");
  if (!p->is_string()) return WrongType("prompt", "a string", *p);
  out->prompt = p->get<std::string>();
  return std::nullopt;
}

}  // namespace prefixd::server
