#include "server/request_parse.h"

#include <gtest/gtest.h>

namespace prefixd::server {
namespace {

ParseLimits Limits() {
  ParseLimits l;
  l.max_tokens_limit = 1000;
  l.vocab_hint = 100;
  return l;
}

std::optional<ApiError> Chat(const std::string& extra, ChatRequest* out = nullptr) {
  ChatRequest local;
  return ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}",
                          Limits(), out ? out : &local);
}

TEST(RequestParse, AcceptsAFullChatRequest) {
  ChatRequest r;
  ASSERT_FALSE(Chat(R"(,"model":"m","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":4,)"
                    R"("seed":3,"stop":["a","b"],"stream":true,)"
                    R"("stream_options":{"include_usage":true},"user":"u","n":1,)"
                    R"("tools":[{"type":"function","function":{"name":"f"}}])",
                    &r));
  EXPECT_EQ(r.params.model, "m");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_DOUBLE_EQ(r.params.sampling.temperature, 0.5);
  EXPECT_EQ(r.params.sampling.top_k, 4);
  EXPECT_EQ(r.params.sampling.seed, 3u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_NE(r.tools_json.find("\"f\""), std::string::npos);
  EXPECT_NE(r.messages_json.find("\"hi\""), std::string::npos);
}

TEST(RequestParse, NullFieldsCountAsAbsent) {
  ChatRequest r;
  ASSERT_FALSE(Chat(R"(,"max_tokens":null,"temperature":null,"stop":null,"tools":null)", &r));
  EXPECT_EQ(r.params.max_tokens, -1);
  EXPECT_TRUE(r.tools_json.empty());
}

TEST(RequestParse, MaxCompletionTokensWins) {
  ChatRequest r;
  ASSERT_FALSE(Chat(R"(,"max_tokens":9,"max_completion_tokens":5)", &r));
  EXPECT_EQ(r.params.max_tokens, 5);
}

TEST(RequestParse, NamesTheBadParameter) {
  struct Case {
    const char* extra;
    const char* param;
  } cases[] = {
      {R"(,"temperature":-0.1)", "temperature"}, {R"(,"temperature":true)", "temperature"},
      {R"(,"top_p":1.5)", "top_p"},             {R"(,"top_k":-1)", "top_k"},
      {R"(,"max_tokens":1.5)", "max_tokens"},   {R"(,"max_tokens":1001)", "max_tokens"},
      {R"(,"max_tokens":-3)", "max_tokens"},    {R"(,"n":2)", "n"},
      {R"(,"stop":[1])", "stop"},               {R"(,"stream":"yes")", "stream"},
      {R"(,"model":5)", "model"},               {R"(,"seed":18446744073709551615)", "seed"},
      {R"(,"presence_penalty":3)", "presence_penalty"},
      {R"(,"logprobs":1)", "logprobs"},         {R"(,"tools":{})", "tools"},
      {R"(,"response_format":{"type":"xml"})", "response_format"},
  };
  for (const Case& c : cases) {
    auto e = Chat(c.extra);
    ASSERT_TRUE(e) << c.extra;
    EXPECT_EQ(e->kind, ErrorKind::kInvalidRequest);
    EXPECT_EQ(e->param, c.param) << c.extra << ": " << e->message;
  }
}

// llama-server's per-request speculation knobs; the rest of its "speculative.*" keys are set
// up at start and refused by name.
TEST(RequestParse, SpeculationKnobs) {
  ChatRequest r;
  ASSERT_FALSE(Chat(R"(,"speculative.n_max":4,"speculative.n_min":2)", &r));
  EXPECT_EQ(r.params.spec_n_max, 4);
  EXPECT_EQ(r.params.spec_n_min, 2);
  ChatRequest d;
  ASSERT_FALSE(Chat("", &d));
  EXPECT_EQ(d.params.spec_n_max, -1);  // the server's
  for (const char* extra : {R"(,"speculative.p_min":0.5)", R"(,"speculative.type":"ngram-mod")",
                            R"(,"speculative":{"n_max":2})"}) {
    auto e = Chat(extra);
    ASSERT_TRUE(e) << extra;
    EXPECT_EQ(e->kind, ErrorKind::kInvalidRequest);
    EXPECT_NE(e->message.find("--spec-type"), std::string::npos) << e->message;
  }
  auto range = Chat(R"(,"speculative.n_max":-1)");
  ASSERT_TRUE(range);
  EXPECT_EQ(range->param, "speculative.n_max");
}

constexpr const char* kTool =
    R"(,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";

TEST(RequestParse, AcceptsTheAgentFields) {
  ChatRequest r;
  ASSERT_FALSE(Chat(std::string(kTool) +
                        R"(,"tool_choice":"required","parallel_tool_calls":true,)"
                        R"("presence_penalty":0.5,"frequency_penalty":-0.5,)"
                        R"("repetition_penalty":1.1,"min_p":0.05,"logit_bias":{"7":-100,"9":2.5},)"
                        R"("logprobs":true,"top_logprobs":3,)"
                        R"("chat_template_kwargs":{"custom":[1,2]},"reasoning_effort":"low",)"
                        R"("response_format":{"type":"json_schema","json_schema":{"name":"n",)"
                        R"("schema":{"type":"object","required":["a"]},"strict":true}})",
                    &r))
      << "parse failed";
  EXPECT_EQ(r.render.tool_choice, engine::ToolChoice::kRequired);
  EXPECT_TRUE(r.render.parallel_tool_calls);
  EXPECT_EQ(r.render.tools_json, r.tools_json);
  EXPECT_DOUBLE_EQ(r.params.sampling.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r.params.sampling.frequency_penalty, -0.5);
  EXPECT_DOUBLE_EQ(r.params.sampling.repetition_penalty, 1.1);
  EXPECT_DOUBLE_EQ(r.params.sampling.min_p, 0.05);
  ASSERT_EQ(r.params.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.params.sampling.logit_bias[0].first, 7);
  EXPECT_FLOAT_EQ(r.params.sampling.logit_bias[0].second, -100.0f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.params.sampling.top_logprobs, 3);
  EXPECT_EQ(r.render.template_kwargs["custom"], "[1,2]");
  EXPECT_EQ(r.render.template_kwargs["reasoning_effort"], "\"low\"");
  EXPECT_TRUE(r.render.enable_thinking);
  EXPECT_EQ(r.render.json_schema, R"({"required":["a"],"type":"object"})");
}

TEST(RequestParse, ToolChoiceForms) {
  ChatRequest r;
  ASSERT_FALSE(Chat(std::string(kTool) +
                        R"(,"tool_choice":{"type":"function","function":{"name":"f"}})",
                    &r));
  EXPECT_EQ(r.render.tool_name, "f");
  r = {};
  ASSERT_FALSE(Chat(R"(,"tool_choice":"none")", &r));
  EXPECT_EQ(r.render.tool_choice, engine::ToolChoice::kNone);
  r = {};
  ASSERT_FALSE(Chat(R"(,"tool_choice":"auto")", &r));
  EXPECT_EQ(r.render.tool_choice, engine::ToolChoice::kAuto);
  EXPECT_EQ(r.params.sampling.top_logprobs, -1);  // no logprobs asked
}

TEST(RequestParse, ThinkingSwitches) {
  ChatRequest r;
  ASSERT_FALSE(Chat(R"(,"chat_template_kwargs":{"enable_thinking":false})", &r));
  EXPECT_FALSE(r.render.enable_thinking);
  r = {};
  ASSERT_FALSE(Chat(R"(,"enable_thinking":false)", &r));
  EXPECT_FALSE(r.render.enable_thinking);
  r = {};
  ASSERT_FALSE(Chat(R"(,"reasoning_effort":"none")", &r));
  EXPECT_FALSE(r.render.enable_thinking);
  EXPECT_EQ(r.render.template_kwargs.count("reasoning_effort"), 0u);
  r = {};
  ASSERT_FALSE(Chat(R"(,"response_format":{"type":"json_object"})", &r));
  EXPECT_EQ(r.render.json_schema, R"({"type":"object"})");
  r = {};
  ASSERT_FALSE(Chat(R"(,"response_format":{"type":"text"})", &r));
  EXPECT_TRUE(r.render.json_schema.empty());
}

TEST(RequestParse, NamesTheBadAgentParameter) {
  struct Case {
    std::string extra;
    const char* param;
  } cases[] = {
      {R"(,"tool_choice":"always")", "tool_choice"},
      {R"(,"tool_choice":5)", "tool_choice"},
      {R"(,"tool_choice":"required")", "tool_choice"},  // no tools
      {std::string(kTool) + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})",
       "tool_choice"},
      {std::string(kTool) + R"(,"tool_choice":{"type":"function"})", "tool_choice"},
      {std::string(kTool) + R"(,"tool_choice":{"function":{"name":"f"}})", "tool_choice"},
      {std::string(kTool) + R"(,"tool_choice":[])", "tool_choice"},
      {R"(,"parallel_tool_calls":"yes")", "parallel_tool_calls"},
      {R"(,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}])", "tools"},
      {R"(,"tools":[{"type":"retrieval","function":{"name":"f"}}])", "tools"},
      {R"(,"response_format":"json")", "response_format"},
      {R"(,"response_format":{"type":"json_schema"})", "response_format"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"schema":[]}})",
       "response_format"},
      {R"(,"frequency_penalty":-2.5)", "frequency_penalty"},
      {R"(,"repetition_penalty":0)", "repetition_penalty"},
      {R"(,"repetition_penalty":"x")", "repetition_penalty"},
      {R"(,"min_p":1.5)", "min_p"},
      {R"(,"logit_bias":[1])", "logit_bias"},
      {R"(,"logit_bias":{"abc":1})", "logit_bias"},
      {R"(,"logit_bias":{"100":1})", "logit_bias"},  // vocab_hint is 100
      {R"(,"logit_bias":{"-1":1})", "logit_bias"},
      {R"(,"logit_bias":{"5":101})", "logit_bias"},
      {R"(,"logit_bias":{"5":"x"})", "logit_bias"},
      {R"(,"top_logprobs":3)", "top_logprobs"},  // without logprobs
      {R"(,"logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"(,"logprobs":true,"stream":true)", "logprobs"},
      {R"(,"chat_template_kwargs":[])", "chat_template_kwargs"},
      {R"(,"chat_template_kwargs":{"enable_thinking":"no"})", "chat_template_kwargs"},
      {R"(,"enable_thinking":1)", "enable_thinking"},
      {R"(,"reasoning_effort":"max")", "reasoning_effort"},
      {R"(,"reasoning_effort":3)", "reasoning_effort"},
  };
  for (const Case& c : cases) {
    auto e = Chat(c.extra);
    ASSERT_TRUE(e) << c.extra;
    EXPECT_EQ(e->kind, ErrorKind::kInvalidRequest);
    EXPECT_EQ(e->param, c.param) << c.extra << ": " << e->message;
  }
}

TEST(RequestParse, CompletionsTakeTheSamplingFields) {
  TextCompletionRequest r;
  ASSERT_FALSE(ParseTextCompletionRequest(
      R"({"prompt":"a","min_p":0.1,"presence_penalty":1,"logit_bias":{"3":5}})", Limits(), &r));
  EXPECT_DOUBLE_EQ(r.params.sampling.min_p, 0.1);
  EXPECT_EQ(r.params.sampling.logit_bias.size(), 1u);
}

TEST(RequestParse, ChecksMessages) {
  ChatRequest r;
  const char* bad[] = {
      R"({})",
      R"({"messages":[]})",
      R"({"messages":[1]})",
      R"({"messages":[{"content":"x"}]})",
      R"({"messages":[{"role":"user"}]})",
      R"({"messages":[{"role":"user","content":5}]})",
      R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})",
      R"({"messages":[{"role":"assistant","content":[{"type":"image_url"}]}]})",
      R"({"messages":[{"role":"assistant","content":null,"tool_calls":{}}]})",
  };
  for (const char* body : bad) {
    auto e = ParseChatRequest(body, Limits(), &r);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->param, "messages") << body;
  }
  EXPECT_FALSE(ParseChatRequest(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},)"
      R"({"role":"assistant","content":null,"tool_calls":[]},{"role":"tool","content":"r"}]})",
      Limits(), &r));
}

TEST(RequestParse, RefusesMalformedOrDeepBodies) {
  ChatRequest r;
  EXPECT_TRUE(ParseChatRequest("", Limits(), &r));
  EXPECT_TRUE(ParseChatRequest("{\"messages\":", Limits(), &r));
  EXPECT_TRUE(ParseChatRequest("\"str\"", Limits(), &r));
  EXPECT_TRUE(ParseChatRequest(std::string(10000, '[') + std::string(10000, ']'), Limits(), &r));
  // Brackets inside strings do not count toward the depth.
  EXPECT_FALSE(ParseChatRequest(
      R"({"messages":[{"role":"user","content":")" + std::string(500, '[') + R"("}]})", Limits(),
      &r));
}

TEST(RequestParse, CompletionPrompts) {
  TextCompletionRequest r;
  ASSERT_FALSE(ParseTextCompletionRequest(R"({"prompt":"abc"})", Limits(), &r));
  EXPECT_EQ(r.prompt, "abc");
  r = {};
  ASSERT_FALSE(ParseTextCompletionRequest(R"({"prompt":["abc"]})", Limits(), &r));
  EXPECT_EQ(r.prompt, "abc");
  r = {};
  ASSERT_FALSE(ParseTextCompletionRequest(R"({"prompt":[1,2,3]})", Limits(), &r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<engine::Token>{1, 2, 3}));
  r = {};
  ASSERT_FALSE(ParseTextCompletionRequest(R"({"prompt":[[4]]})", Limits(), &r));
  EXPECT_EQ(r.prompt_tokens, (std::vector<engine::Token>{4}));
  for (const char* body : {R"({})", R"({"prompt":5})", R"({"prompt":["a","b"]})",
                           R"({"prompt":[100]})", R"({"prompt":[-1]})", R"({"prompt":[1.5]})",
                           R"({"prompt":"a","echo":true})", R"({"prompt":"a","logprobs":2})"}) {
    TextCompletionRequest t;
    auto e = ParseTextCompletionRequest(body, Limits(), &t);
    ASSERT_TRUE(e) << body;
  }
}

TEST(RequestParse, TokenizeAndDetokenize) {
  TokenizeRequest t;
  ASSERT_FALSE(ParseTokenizeRequest(R"({"content":"x","with_pieces":true})", &t));
  EXPECT_EQ(t.content, "x");
  EXPECT_TRUE(t.with_pieces);
  EXPECT_TRUE(ParseTokenizeRequest(R"({"content":null})", &t));
  std::vector<engine::Token> tokens;
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens":[1,99]})", &tokens, Limits()));
  EXPECT_EQ(tokens.size(), 2u);
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"tokens":[100]})", &tokens, Limits()));
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"tokens":"1"})", &tokens, Limits()));
}

}  // namespace
}  // namespace prefixd::server

namespace prefixd::server {
namespace {

// An object schema of `n` properties, the first `required` of them required.
std::string ObjectSchema(size_t n, size_t required) {
  std::string props, req;
  for (size_t i = 0; i < n; ++i) {
    props += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\":{\"type\":\"integer\"}";
    if (i < required) req += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\"";
  }
  return "{\"type\":\"object\",\"properties\":{" + props + "},\"required\":[" + req + "]}";
}

// What a schema may cost to become a grammar is bounded before any grammar is built: the
// optional properties of one object (required ones are cheap), in a response_format and in a
// tool's parameters alike.
TEST(RequestParse, SchemasPastTheirGrammarCostAreRefused) {
  auto format = [](const std::string& schema) {
    return R"(,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":)" +
           schema + "}}";
  };
  auto tool = [](const std::string& schema) {
    return R"(,"tools":[{"type":"function","function":{"name":"f","parameters":)" + schema + "}}]";
  };
  EXPECT_FALSE(Chat(format(ObjectSchema(kMaxOptionalProperties, 0))));
  EXPECT_FALSE(Chat(format(ObjectSchema(800, 800))));  // all required: a sequence
  auto e = Chat(format(ObjectSchema(kMaxOptionalProperties + 1, 0)));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format");
  EXPECT_NE(e->message.find("optional properties"), std::string::npos) << e->message;
  EXPECT_FALSE(Chat(tool(ObjectSchema(kMaxOptionalProperties, 0))));
  e = Chat(tool(ObjectSchema(800, 0)));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools");
  EXPECT_NE(e->message.find("tool 'f'"), std::string::npos) << e->message;
  std::string wide = "{\"enum\":[";
  for (size_t i = 0; i <= kMaxSchemaNodes; ++i) wide += (i ? "," : "") + std::to_string(i);
  e = Chat(format(wide + "]}"));
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("JSON values"), std::string::npos) << e->message;
}

TEST(RequestParse, TokenizeTakesBoundedText) {
  TokenizeRequest t;
  EXPECT_FALSE(ParseTokenizeRequest(R"({"content":"abc","with_pieces":true})", &t));
  const std::string big(kMaxTokenizeBytes + 1, 'a');
  auto e = ParseTokenizeRequest("{\"content\":\"" + big + "\"}", &t);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "content");
}

}  // namespace
}  // namespace prefixd::server
