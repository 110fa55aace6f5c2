// Chat output: the sampler on common_sampler (greedy unchanged, logit bias,
// penalties, grammars), logprobs, the reply parser on real templates, grammar-constrained
// tool calls and JSON, and the cache across a tool-call turn.
#include "engine/chat/chat_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/context.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/chat/pinned_assets.h"
#include "engine/sampler.h"
#include "engine/testgen/test_model.h"
#include "engine/test_temp_dir.h"
#include "llama.h"

namespace prefixd::engine {
namespace {

using json = nlohmann::json;

const std::string& TinyModelPath() {
  static const std::string path = [] {
    auto dir = std::filesystem::temp_directory_path() /
               ("prefixd-chat-output-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(testing::RemoveAtExit(dir.string()));
    std::string p = (dir / "llama.gguf").string();
    Status st = MakeTestModel({"llama", "tiny", 3}, p);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return p;
  }();
  return path;
}

// A model with a context that has decoded a short prompt (logits of its last token ready).
struct Decoded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  const float* logits = nullptr;
  int n_vocab = 0;

  Decoded() {
    auto m = Model::Load({TinyModelPath(), 0});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = std::move(m).value();
    ContextOptions co;
    co.n_ctx_per_seq = 256;
    co.n_batch = co.n_ubatch = 64;
    co.n_threads = 1;
    auto c = Context::Create(*model, co);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    ctx = std::move(c).value();
    std::vector<Token> prompt = model->Tokenize("The weather today is", true);
    EXPECT_TRUE(ctx->DecodeChunk(0, prompt, 0, true).ok());
    logits = ctx->Logits(-1);
    n_vocab = model->n_vocab();
  }
  Token Argmax(Token skip = -1) const {
    Token best = skip == 0 ? 1 : 0;
    for (Token t = 0; t < n_vocab; ++t) {
      if (t != skip && logits[t] > logits[best]) best = t;
    }
    return best;
  }
  Token Sample(const SamplingOptions& o) const {
    auto s = Sampler::Create(*model, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return *(*s)->Sample(ctx->raw(), -1);
  }
};

TEST(SamplerTest, GreedyIsTheArgmax) {
  Decoded d;
  EXPECT_EQ(d.Sample({}), d.Argmax());  // the plain-greedy path
  SamplingOptions through_common;       // a zero bias takes common's chain at temperature 0
  through_common.logit_bias = {{d.Argmax() == 3 ? 4 : 3, 0.0f}};
  EXPECT_EQ(d.Sample(through_common), d.Argmax());
}

TEST(SamplerTest, LogitBiasChangesTheChoice) {
  Decoded d;
  const Token top = d.Argmax();
  const Token other = top == 5 ? 6 : 5;
  SamplingOptions o;
  o.logit_bias = {{other, 100.0f}};
  EXPECT_EQ(d.Sample(o), other);
  o.logit_bias = {{top, -INFINITY}};
  EXPECT_EQ(d.Sample(o), d.Argmax(top));  // banned: the runner-up wins
}

TEST(SamplerTest, PresencePenaltyTurnsAwayFromAGeneratedToken) {
  Decoded d;
  const Token top = d.Argmax();
  const Token second = d.Argmax(top);
  SamplingOptions o;
  o.presence_penalty = double(d.logits[top] - d.logits[second]) + 1.0;
  auto s = Sampler::Create(*d.model, o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*(*s)->Sample(d.ctx->raw(), -1), top);     // nothing generated yet: no penalty
  EXPECT_EQ(*(*s)->Sample(d.ctx->raw(), -1), second);  // `top` was generated once
  SamplingOptions plain;
  auto g = Sampler::Create(*d.model, plain);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->Sample(d.ctx->raw(), -1).ok());
  EXPECT_EQ(*(*g)->Sample(d.ctx->raw(), -1), top);  // without the penalty: the same again
}

TEST(SamplerTest, FrequencyAndRepetitionPenaltiesApply) {
  Decoded d;
  const Token top = d.Argmax();
  const Token second = d.Argmax(top);
  SamplingOptions o;
  o.frequency_penalty = double(d.logits[top] - d.logits[second]) + 1.0;
  auto s = Sampler::Create(*d.model, o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Sample(d.ctx->raw(), -1).ok());
  EXPECT_EQ(*(*s)->Sample(d.ctx->raw(), -1), second);
  SamplingOptions bad;
  bad.repetition_penalty = 0.0;
  EXPECT_FALSE(Sampler::Create(*d.model, bad).ok());  // common refuses: a clear error
}

TEST(SamplerTest, GrammarForcesTheFirstToken) {
  Decoded d;
  SamplingOptions o;
  o.grammar.kind = GrammarKind::kUser;
  o.grammar.gbnf = "root ::= \"zebra\"";
  const Token t = d.Sample(o);
  const std::string piece = d.model->TokenPiece(t, false);
  ASSERT_FALSE(piece.empty());
  EXPECT_EQ(std::string("zebra").rfind(piece, 0), 0u) << piece;
}

TEST(SamplerTest, BadGrammarIsInvalidArgument) {
  Decoded d;
  SamplingOptions o;
  o.grammar.kind = GrammarKind::kUser;
  o.grammar.gbnf = "root ::= (";
  auto s = Sampler::Create(*d.model, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
}

TEST(SamplerTest, LogprobsAreALogSoftmax) {
  const float logits[4] = {0.0f, std::log(2.0f), std::log(2.0f), std::log(3.0f)};
  TokenLogprobs lp = ComputeLogprobs(logits, 4, 1, 3);
  EXPECT_NEAR(lp.chosen.logprob, std::log(2.0 / 8.0), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 3);
  EXPECT_EQ(lp.top[1].token, 1);  // ties: the lowest id first
  EXPECT_EQ(lp.top[2].token, 2);
  EXPECT_NEAR(lp.top[0].logprob, std::log(3.0 / 8.0), 1e-5);
}

// --- The reply parser on real templates ---

const char* kWeatherTools = R"([{"type":"function","function":{"name":"get_weather",
  "description":"Weather of a city","parameters":{"type":"object",
  "properties":{"city":{"type":"string"}},"required":["city"]}}}])";
const char* kUserAsks = R"([{"role":"user","content":"Weather in Paris?"}])";
// Arguments a grammar bounds (an integer, a boolean), so that a random model ends its call.
// (Qwen3.5 writes string arguments as free text up to </parameter>.)
const char* kForecastTools = R"([{"type":"function","function":{"name":"forecast",
  "parameters":{"type":"object","properties":{"days":{"type":"integer"},
  "metric":{"type":"boolean"}},"required":["days","metric"]}}}])";

// The forecast tool and a second one: with several tools a forced call must choose the name.
// Their strings are enums: every format's grammar holds them (patch 0020 for the XML-style ones,
// where a string was free text up to its closing tag). No free-text string: this vocabulary's
// byte tokens let a random model write invalid UTF-8, which the grammar takes and the parser
// refuses (the e2e schema suite holds string lengths on qwen35's vocabulary).
const char* kTwoTools = R"([{"type":"function","function":{"name":"forecast",
  "parameters":{"type":"object","properties":{"days":{"type":"integer","minimum":1,"maximum":14},
  "metric":{"type":"boolean"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},
  "required":["days","metric","unit"],"additionalProperties":false}}},
  {"type":"function","function":{"name":"clock","parameters":{"type":"object",
  "properties":{"utc":{"type":"boolean"},"zone":{"type":"string","enum":["CET","UTC+1"]}},
  "required":["utc"],"additionalProperties":false}}}])";



// tool_choice required over the forecast tool, thinking off.
ChatRenderOptions RequiredForecast() {
  ChatRenderOptions o;
  o.tools_json = kForecastTools;
  o.tool_choice = ToolChoice::kRequired;
  o.enable_thinking = false;
  return o;
}

std::unique_ptr<ChatTemplate> PinnedTemplate(const Model& model, const std::string& name) {
  auto source = LoadTemplateSource(name);
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  auto t = ChatTemplate::Create(model, *source);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

ChatRender RenderTools(const ChatTemplate& t, ToolChoice choice, const std::string& name = "") {
  ChatRenderOptions o;
  o.tools_json = kWeatherTools;
  o.tool_choice = choice;
  o.tool_name = name;
  auto chat = t.Parse(kUserAsks, o);
  EXPECT_TRUE(chat.ok()) << chat.status().ToString();
  auto r = t.RenderWithOutput(*chat);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

TEST(ChatOutputTest, QwenXmlToolCallParses) {
  auto model = Model::Load({TinyModelPath(), 0});
  ASSERT_TRUE(model.ok());
  auto t = PinnedTemplate(**model, "Qwen3.5-4B");
  ChatRender r = RenderTools(*t, ToolChoice::kAuto);
  EXPECT_FALSE(r.output.parser.empty());
  EXPECT_TRUE(r.output.parse_tool_calls);
  EXPECT_TRUE(r.output.grammar.lazy);  // auto: the grammar starts at <tool_call>
  const std::string reply =
      "Let me check.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
      "Paris\n</parameter>\n</function>\n</tool_call>";
  ChatMessage m = ParseChatOutput(r.output, reply);
  EXPECT_EQ(m.reasoning_content.rfind("Let me check.", 0), 0u) << m.reasoning_content;
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(m.tool_calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(m.tool_calls[0].id.rfind("call_", 0), 0u);
}

// Streaming: the deltas of a reply fed a few bytes at a time add up to the whole parse.
TEST(ChatOutputTest, StreamedDeltasAddUpToTheMessage) {
  auto model = Model::Load({TinyModelPath(), 0});
  ASSERT_TRUE(model.ok());
  auto t = PinnedTemplate(**model, "Qwen3.5-4B");
  ChatRender r = RenderTools(*t, ToolChoice::kAuto);
  const std::string reply =
      "Hmm.\n</think>\n\nSure.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
      "Paris\n</parameter>\n</function>\n</tool_call>";
  ChatOutputParser parser(r.output);
  std::string reasoning, content, name, args, id;
  for (size_t n = 3; ; n = std::min(reply.size(), n + 3)) {
    for (const ChatDelta& d : parser.Update(reply.substr(0, n), n == reply.size())) {
      reasoning += d.reasoning_content;
      content += d.content;
      if (d.tool_index == ChatDelta::npos) continue;
      EXPECT_EQ(d.tool_index, 0u);
      name += d.tool_call.name;
      args += d.tool_call.arguments;
      if (!d.tool_call.id.empty()) id = d.tool_call.id;
    }
    if (n == reply.size()) break;
  }
  const ChatMessage& m = parser.message();
  EXPECT_EQ(reasoning, m.reasoning_content);
  EXPECT_EQ(content, m.content);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(json::parse(args), json::parse(m.tool_calls[0].arguments));
  EXPECT_EQ(id, m.tool_calls[0].id);
}

TEST(ChatOutputTest, TextOutsideTheFormatIsContent) {
  OutputFormat plain;
  ChatMessage m = ParseChatOutput(plain, "just text <tool_call>");
  EXPECT_EQ(m.content, "just text <tool_call>");
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(ChatOutputTest, GptOssKeepsItsControlTokens) {
  auto model = Model::Load({TinyModelPath(), 0});
  ASSERT_TRUE(model.ok());
  auto t = PinnedTemplate(**model, "openai-gpt-oss-120b");
  ChatRender r = RenderTools(*t, ToolChoice::kRequired);
  EXPECT_FALSE(r.output.grammar.gbnf.empty());
  EXPECT_NE(std::find(r.preserved_tokens.begin(), r.preserved_tokens.end(), "<|channel|>"),
            r.preserved_tokens.end());
  const std::string reply =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}";
  ChatMessage m = ParseChatOutput(r.output, reply);
  ASSERT_EQ(m.tool_calls.size(), 1u) << m.content;
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(m.tool_calls[0].arguments), json({{"city", "Paris"}}));
}

TEST(ChatOutputTest, NamedToolNotAmongTheToolsIsRefused) {
  auto model = Model::Load({TinyModelPath(), 0});
  ASSERT_TRUE(model.ok());
  auto t = PinnedTemplate(**model, "Qwen3.5-4B");
  ChatRenderOptions o;
  o.tools_json = kWeatherTools;
  o.tool_name = "no_such_tool";
  auto chat = t->Parse(kUserAsks, o);
  ASSERT_TRUE(chat.ok());
  EXPECT_FALSE(t->RenderWithOutput(*chat).ok());
}

TEST(ChatOutputTest, RenderOptionsKeyCoversKwargs) {
  ChatRenderOptions a, b;
  b.template_kwargs["reasoning_effort"] = "\"low\"";
  EXPECT_NE(RenderOptionsKey(a), RenderOptionsKey(b));
  b = a;
  b.enable_thinking = false;
  EXPECT_NE(RenderOptionsKey(a), RenderOptionsKey(b));
  b = a;
  b.add_generation_prompt = false;
  EXPECT_EQ(RenderOptionsKey(a), RenderOptionsKey(b));  // prefix renders never add one
}

// --- Through the engine: constrained replies and the cache across a tool-call turn ---

std::unique_ptr<Engine> MakeEngine(const std::string& template_name) {
  EngineOptions o;
  o.model_path = TinyModelPath();
  o.block_size = 16;
  o.n_ctx_per_slot = 4096;
  o.n_batch = o.n_ubatch = 256;
  o.n_threads = 1;
  o.ram_budget_bytes = 256ull << 20;
  if (!template_name.empty()) {
    auto source = LoadTemplateSource(template_name);
    EXPECT_TRUE(source.ok());
    o.chat_template = *source;
  }
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

CompletionResult Generate(Engine& e, const Prompt& p, int max_tokens,
                          const std::vector<std::pair<Token, float>>& bias = {}) {
  CompletionRequest r;
  r.prompt = p;
  r.max_tokens = max_tokens;
  r.sampling.logit_bias = bias;
  r.sampling.grammar = p.output.grammar;
  r.stop = p.output.additional_stops;
  auto res = e.Complete(std::move(r));
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return std::move(res).value();
}

TEST(ChatEngineTest, BadTemplateNameFailsAtStart) {
  EXPECT_FALSE(LoadTemplateSource("No-Such-Template").ok());
  EngineOptions o;
  o.model_path = TinyModelPath();
  o.chat_template = "{% if %}";
  EXPECT_FALSE(Engine::Create(o).ok());
}

// With random weights the model never starts a call by itself (the template's grammar lets a
// reply begin with free text); a bias on <tool_call> (one token in the test vocabulary) makes
// it start one, and from there the grammar writes a well-formed call of the schema.
TEST(ChatEngineTest, RequiredToolChoiceYieldsAParsedCall) {
  auto e = MakeEngine("Qwen3.5-4B");
  auto p = e->PrepareChat(kUserAsks, RequiredForecast());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_FALSE(p->output.grammar.empty());
  EXPECT_FALSE(p->output.grammar.lazy);
  const std::vector<Token> start = e->Tokenize("<tool_call>");
  ASSERT_EQ(start.size(), 1u);
  CompletionResult r = Generate(*e, *p, 300, {{start[0], 100.0f}});
  EXPECT_EQ(r.finish_reason, FinishReason::kStop) << r.text;
  ChatMessage m = ParseChatOutput(p->output, r.text);
  ASSERT_EQ(m.tool_calls.size(), 1u) << r.text;
  EXPECT_EQ(m.tool_calls[0].name, "forecast");
  json args = json::parse(m.tool_calls[0].arguments);
  EXPECT_TRUE(args["days"].is_number_integer()) << args.dump();
  EXPECT_TRUE(args["metric"].is_boolean()) << args.dump();
}

// A forced tool call is a call, with no bias, on every pinned template that has a tool format:
// two tools, tool_choice required (the model chooses which) and a named function, thinking on
// (where the template opens a reasoning block, the call follows its end) and off, the tiny
// model's reply parses into one call of that tool's schema (its enum, bounds and lengths), and
// ends there. The sampler decodes the template's call header (GrammarSpec::forced_call) as the
// reply's start; the grammar writes the rest.
struct ForcedCase {
  std::string tmpl;
  bool named;
  bool thinking;
};

// Pinned templates with no tool format (common renders tools into none of them, so no grammar
// can hold a call): a forced call is a 400 naming the template.
const std::set<std::string>& NoToolFormat() {
  static const std::set<std::string> names = {
      "HuggingFaceTB-SmolLM3-3B", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
      "google-gemma-2-2b-it", "ibm-granite-granite-3.3-2B-Instruct", "llama-cpp-rwkv-world",
      "microsoft-Phi-3.5-mini-instruct"};
  return names;
}

class ForcedCallTest : public ::testing::TestWithParam<ForcedCase> {};

TEST_P(ForcedCallTest, ReplyIsAParsedCall) {
  const ForcedCase& c = GetParam();
  auto e = MakeEngine(c.tmpl);
  ChatRenderOptions o;
  o.tools_json = kTwoTools;
  o.tool_choice = ToolChoice::kRequired;
  if (c.named) o.tool_name = "forecast";
  o.enable_thinking = c.thinking;
  auto p = e->PrepareChat(kUserAsks, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_FALSE(p->output.grammar.empty());
  EXPECT_FALSE(p->output.grammar.lazy);
  // A random model never ends its reasoning by itself: a budget of 8 tokens ends it (common's
  // reasoning-budget sampler forces the end tag), and the call must follow it.
  CompletionRequest req;
  req.prompt = *p;
  req.max_tokens = 400;
  req.sampling.grammar = p->output.grammar;
  req.sampling.reasoning_budget = 8;
  req.stop = p->output.additional_stops;
  auto done = e->Complete(std::move(req));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  const CompletionResult& r = *done;
  ChatMessage m = ParseChatOutput(p->output, r.text);
  const GrammarSpec& g = p->output.grammar;
  std::printf("[ forced ] %s named=%d thinking=%d: %zu call(s), finish %s, %d tokens, header %s\n",
              c.tmpl.c_str(), c.named, c.thinking, m.tool_calls.size(),
              FinishReasonName(r.finish_reason), r.usage.completion_tokens,
              json(g.forced_call).dump().c_str());
  ASSERT_EQ(m.tool_calls.size(), 1u) << "header '" << g.forced_call << "': " << r.text.substr(0, 400);
  const size_t open = g.thinking_start.empty() ? std::string::npos
                                               : g.generation_prompt.rfind(g.thinking_start);
  bool opened = c.thinking && open != std::string::npos;
  for (const std::string& end : g.thinking_end) {
    if (opened && !end.empty() && g.generation_prompt.find(end, open) != std::string::npos) opened = false;
  }
  if (opened) EXPECT_FALSE(m.reasoning_content.empty()) << "the call did not follow a reasoning block";
  const ChatToolCall& call = m.tool_calls[0];
  if (c.named) EXPECT_EQ(call.name, "forecast");
  json args = json::parse(call.arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << call.arguments;
  EXPECT_EQ(r.finish_reason, FinishReason::kStop) << r.text.substr(0, 400);
  if (call.name == "clock") {
    EXPECT_TRUE(args["utc"].is_boolean()) << args.dump();
    if (args.contains("zone")) {
      EXPECT_TRUE(args["zone"] == "CET" || args["zone"] == "UTC+1") << args.dump();
    }
    EXPECT_LE(args.size(), 2u) << args.dump();
  } else {
    EXPECT_EQ(call.name, "forecast");
    ASSERT_TRUE(args["days"].is_number_integer()) << args.dump();
    EXPECT_GE(args["days"].get<int64_t>(), 1) << args.dump();
    EXPECT_LE(args["days"].get<int64_t>(), 14) << args.dump();
    EXPECT_TRUE(args["metric"].is_boolean()) << args.dump();
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args.dump();
    EXPECT_EQ(args.size(), 3u) << args.dump();
  }
}

// Every pinned template with a tool format. The five templates agents meet most run every
// combination; the rest run required with thinking off and a named function with thinking on.
std::vector<ForcedCase> ForcedCases() {
  const std::set<std::string> full = {"Qwen3.5-4B", "Qwen3-Coder",
                                      "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                                      "ibm-granite-granite-4.0", "deepseek-ai-DeepSeek-V3.2"};
  std::vector<ForcedCase> out;
  for (const std::string& t : PinnedTemplateNames()) {
    if (NoToolFormat().count(t) != 0) continue;
    for (bool named : {false, true}) {
      for (bool thinking : {false, true}) {
        if (full.count(t) != 0 || named == thinking) out.push_back({t, named, thinking});
      }
    }
  }
  return out;
}

std::string ForcedName(const ::testing::TestParamInfo<ForcedCase>& info) {
  std::string n = info.param.tmpl;
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n + (info.param.named ? "_named" : "_required") + (info.param.thinking ? "_think" : "");
}

INSTANTIATE_TEST_SUITE_P(Templates, ForcedCallTest, ::testing::ValuesIn(ForcedCases()), ForcedName);

// parallel_tool_calls: false admits exactly one call, true several. A bias on <tool_call> (one
// token in the test vocabulary) makes the random model start another call wherever the grammar
// lets it: after the first, only the parallel grammar does.
TEST(ChatEngineTest, ParallelToolCallsAdmitsSeveralCallsAndOtherwiseOne) {
  auto e = MakeEngine("Qwen3.5-4B");
  const std::vector<Token> start = e->Tokenize("<tool_call>");
  ASSERT_EQ(start.size(), 1u);
  auto calls = [&](bool parallel) {
    ChatRenderOptions o = RequiredForecast();
    o.parallel_tool_calls = parallel;
    auto p = e->PrepareChat(kUserAsks, o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    CompletionResult r = Generate(*e, *p, 400, {{start[0], 100.0f}});
    ChatMessage m = ParseChatOutput(p->output, r.text);
    // The calls before the last are whole (the last may be cut by max_tokens).
    const size_t whole = std::max<size_t>(m.tool_calls.size(), 2) - 1;
    for (size_t i = 0; i < whole && i < m.tool_calls.size(); ++i) {
      EXPECT_EQ(m.tool_calls[i].name, "forecast");
      json args = json::parse(m.tool_calls[i].arguments, nullptr, false);
      EXPECT_TRUE(args.is_object() && args["days"].is_number_integer()) << m.tool_calls[i].arguments;
    }
    return std::make_pair(m.tool_calls.size(), r.finish_reason);
  };
  const auto one = calls(false);
  EXPECT_EQ(one.first, 1u);
  EXPECT_EQ(one.second, FinishReason::kStop);
  EXPECT_GE(calls(true).first, 2u);
}

// The tagged formats' grammars (GLM-4.7, Spark, Ling, ...) let a call end with whitespace
// before its close tag; the pinned parser refused such a call as text (patch 0010).
TEST(ChatOutputParseTest, ACallEndingInWhitespaceBeforeItsCloseTagParses) {
  auto e = MakeEngine("GLM-4.7-Flash");
  auto p = e->PrepareChat(kUserAsks, RequiredForecast());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (const char* sep : {"", "\n", " \n"}) {
    const std::string text = std::string("<tool_call>forecast<arg_key>days</arg_key><arg_value>3") +
                             "</arg_value>" + sep + "<arg_key>metric</arg_key><arg_value>true" +
                             "</arg_value>" + sep + "</tool_call>";
    ChatMessage m = ParseChatOutput(p->output, text);
    ASSERT_EQ(m.tool_calls.size(), 1u) << "separator '" << sep << "': " << m.content;
    EXPECT_EQ(json::parse(m.tool_calls[0].arguments), json::parse(R"({"days":3,"metric":true})"));
  }
}

// A template with no tool format cannot honour a forced call: a clear error naming the
// template, never text where the client was promised a call.
TEST(ForcedCallRefusedTest, ATemplateWithoutAToolFormatIsAnErrorNamingIt) {
  for (const std::string& t : NoToolFormat()) {
    auto e = MakeEngine(t);
    ChatRenderOptions o;
    o.tools_json = kForecastTools;
    o.tool_choice = ToolChoice::kRequired;
    auto p = e->PrepareChat(kUserAsks, o);
    ASSERT_FALSE(p.ok()) << t;
    EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument) << t;
    EXPECT_NE(p.status().message().find("no tool-call format"), std::string::npos) << p.status().ToString();
    EXPECT_NE(p.status().message().find(t), std::string::npos) << p.status().ToString();
    o.tool_choice = ToolChoice::kAuto;
    EXPECT_TRUE(e->PrepareChat(kUserAsks, o).ok()) << t << ": auto still renders";
  }
}

// A reasoning budget holds without tools or a grammar: with a budget of 2 tokens the block's end
// tag is forced after 2 and the reply goes on as content, where without one the model reasons
// longer before it ends the block itself.
TEST(ChatEngineTest, ReasoningBudgetEndsTheBlockWithoutAGrammar) {
  auto e = MakeEngine("Qwen3.5-4B");
  auto p = e->PrepareChat(kUserAsks, ChatRenderOptions{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(p->output.grammar.empty());
  ASSERT_FALSE(p->output.grammar.thinking_end.empty());
  auto reply = [&](int budget) {
    CompletionRequest r;
    r.prompt = *p;
    r.max_tokens = 40;
    r.sampling.ignore_eos = true;
    r.sampling.reasoning_budget = budget;
    r.sampling.grammar = p->output.grammar;  // no grammar: the thinking tags
    auto done = e->Complete(std::move(r));
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    return ParseChatOutput(p->output, done.ok() ? done->text : "");
  };
  const ChatMessage unbounded = reply(-1);
  const ChatMessage bounded = reply(2);
  EXPECT_FALSE(bounded.reasoning_content.empty());
  EXPECT_FALSE(bounded.content.empty()) << "the reasoning did not end at its budget";
  EXPECT_LT(bounded.reasoning_content.size(), unbounded.reasoning_content.size())
      << "'" << bounded.reasoning_content << "' vs '" << unbounded.reasoning_content << "'";
}

// A reasoning budget is what the model writes: Apriel's generation prompt opens the block and
// writes ten tokens into it ("Here are my reasoning steps:\n"), which common counted against the
// budget, so a budget of 8 ran out inside the prompt and the end tag came out from its middle
// ("FINAL RESPONSE]").
TEST(ChatEngineTest, AReasoningBudgetCountsOnlyWhatTheModelWrites) {
  auto e = MakeEngine("Apriel-1.6-15b-Thinker-fixed");
  auto p = e->PrepareChat(kUserAsks, ChatRenderOptions{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->output.grammar.thinking_end.size(), 1u);
  const std::string& end = p->output.grammar.thinking_end.front();
  CompletionRequest r;
  r.prompt = *p;
  r.max_tokens = 40;
  r.sampling.ignore_eos = true;
  r.sampling.reasoning_budget = 8;
  r.sampling.grammar = p->output.grammar;
  auto done = e->Complete(std::move(r));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_NE(done->text.find(end), std::string::npos) << "'" << end << "' not in: " << done->text;
  // The end tag's tokens follow 8 tokens of the model's own, or a few more when the 8th ends
  // inside a UTF-8 character (common completes it first). Before, they came first, cut.
  const std::vector<Token> tag = e->Tokenize(end);
  const auto at = std::search(done->tokens.begin(), done->tokens.end(), tag.begin(), tag.end());
  ASSERT_NE(at, done->tokens.end()) << done->text;
  EXPECT_GE(at - done->tokens.begin(), 8) << done->text;
  EXPECT_LE(at - done->tokens.begin(), 8 + 3) << done->text;
}

TEST(ChatEngineTest, WithoutAToolChoiceTheGrammarIsLazy) {
  auto e = MakeEngine("Qwen3.5-4B");
  ChatRenderOptions o;
  o.tools_json = kForecastTools;
  auto p = e->PrepareChat(kUserAsks, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->output.grammar.lazy);
  ASSERT_FALSE(p->output.grammar.triggers.empty());
  // <tool_call> is one token of the vocabulary and a preserved token: a token trigger.
  EXPECT_EQ(p->output.grammar.triggers[0].type, GrammarTrigger::Type::kToken);
  EXPECT_EQ(p->output.grammar.triggers[0].token, e->Tokenize("<tool_call>")[0]);
}

// The template's thinking tags reach the sampler (common's reasoning-budget sampler keeps a lazy
// grammar off inside the thinking block; Qwen3.5 also ends thinking at <tool_call>), and with
// thinking off the first <tool_call> starts the grammar at once.
TEST(ChatEngineTest, ThinkingTagsAndALazyStart) {
  auto e = MakeEngine("Qwen3.5-4B");
  ChatRenderOptions o;
  o.tools_json = kForecastTools;  // auto: lazy
  auto p = e->PrepareChat(kUserAsks, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(p->output.grammar.lazy);
  EXPECT_EQ(p->output.grammar.thinking_start, "<think>");
  const auto& end = p->output.grammar.thinking_end;
  EXPECT_NE(std::find(end.begin(), end.end(), "</think>"), end.end());
  EXPECT_NE(p->output.grammar.generation_prompt.find("<think>"), std::string::npos);
  o.enable_thinking = false;
  auto q = e->PrepareChat(kUserAsks, o);
  ASSERT_TRUE(q.ok());
  const Token start = e->Tokenize("<tool_call>")[0];
  CompletionResult c = Generate(*e, *q, 6, {{start, 100.0f}});
  // Without the grammar the bias would repeat <tool_call>; started, it forces the function.
  EXPECT_EQ(c.text.rfind("<tool_call>\n<function=", 0), 0u) << c.text;
}

TEST(ChatEngineTest, JsonSchemaReplyParses) {
  auto e = MakeEngine("");
  ChatRenderOptions o;
  o.json_schema = R"({"type":"object","properties":{"answer":{"type":"integer"}},
                      "required":["answer"],"additionalProperties":false})";
  o.enable_thinking = false;
  auto p = e->PrepareChat(kUserAsks, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_FALSE(p->output.grammar.empty());
  CompletionResult r = Generate(*e, *p, 200);
  ChatMessage m = ParseChatOutput(p->output, r.text);
  json reply = json::parse(m.content, nullptr, false);
  ASSERT_FALSE(reply.is_discarded()) << r.text;
  EXPECT_TRUE(reply["answer"].is_number_integer()) << r.text;
}

// The assistant's tool call and the tool's result, sent back, restore the turn before them.
TEST(ChatEngineTest, ToolCallTurnRestoresFromTheCache) {
  auto e = MakeEngine("Qwen3.5-4B");
  ChatRenderOptions o = RequiredForecast();
  const std::string system = std::string(R"({"role":"system","content":")") +
                             std::string(300, 'x') + R"("})";
  const std::string first = "[" + system + R"(,{"role":"user","content":"Weather in Paris?"}])";
  auto p1 = e->PrepareChat(first, o);
  ASSERT_TRUE(p1.ok()) << p1.status().ToString();
  CompletionResult r1 = Generate(*e, *p1, 300, {{e->Tokenize("<tool_call>")[0], 100.0f}});
  ChatMessage m = ParseChatOutput(p1->output, r1.text);
  ASSERT_EQ(m.tool_calls.size(), 1u) << r1.text;
  json turn = json::parse(first);
  turn.push_back({{"role", "assistant"},
                  {"content", m.content},
                  {"tool_calls", json::array({{{"id", m.tool_calls[0].id},
                                               {"type", "function"},
                                               {"function", {{"name", m.tool_calls[0].name},
                                                             {"arguments", m.tool_calls[0].arguments}}}}})}});
  turn.push_back({{"role", "tool"}, {"tool_call_id", m.tool_calls[0].id}, {"content", "sunny"}});
  o.tool_choice = ToolChoice::kAuto;
  auto p2 = e->PrepareChat(turn.dump(), o);
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  CompletionResult r2 = Generate(*e, *p2, 4);
  ASSERT_FALSE(p1->capture_points.empty());
  // At least the first request's conversation up to its generation prompt (its tail).
  EXPECT_GE(r2.usage.cached_tokens, p1->capture_points.back());
  EXPECT_GT(r2.usage.cached_tokens, 0);
}

}  // namespace
}  // namespace prefixd::engine
