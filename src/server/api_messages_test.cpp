// The Anthropic Messages translator: requests into chat bodies, chat answers into Messages and
// the Messages event stream. No model, no HTTP.
#include "server/api_messages.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace prefixd::server {
namespace {

using json = nlohmann::json;

json ToChat(const std::string& body, MessagesCall call = MessagesCall::kCreate) {
  std::string chat;
  auto e = MessagesToChat(body, call, &chat);
  EXPECT_FALSE(e) << (e ? e->message : "");
  return e ? json() : json::parse(chat);
}

TEST(MessagesToChat, SystemTextAndParams) {
  json chat = ToChat(R"({"model":"m","max_tokens":64,"system":"Be brief.",
    "messages":[{"role":"user","content":"Hi"}],"stop_sequences":["END"],
    "temperature":0.2,"top_p":0.8,"top_k":5,"metadata":{"user_id":"u"}})");
  EXPECT_EQ(chat["messages"], json::parse(R"([{"role":"system","content":"Be brief."},
                                              {"role":"user","content":"Hi"}])"));
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["max_tokens"], 64);
  EXPECT_EQ(chat["stop"], json::parse(R"(["END"])"));
  EXPECT_EQ(chat["temperature"], 0.2);
  EXPECT_EQ(chat["top_p"], 0.8);
  EXPECT_EQ(chat["top_k"], 5);
  EXPECT_FALSE(chat.contains("metadata"));
}

TEST(MessagesToChat, SystemBlocksAndTheBillingStamp) {
  json chat = ToChat(R"({"max_tokens":8,"messages":[{"role":"user","content":"q"}],
    "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1; cch=a5145;"},
              {"type":"text","text":"You are an agent.","cache_control":{"type":"ephemeral"}}]})");
  EXPECT_EQ(chat["messages"][0]["content"],
            "x-anthropic-billing-header: cc_version=2.1; cch=fffff;\n\nYou are an agent.");
}

TEST(MessagesToChat, EveryBlockTypeOfAToolLoop) {
  json chat = ToChat(R"({"max_tokens":8,"messages":[
    {"role":"user","content":[{"type":"text","text":"Weather?"},{"type":"text","text":"Paris."}]},
    {"role":"assistant","content":[
      {"type":"thinking","thinking":"Need a tool.","signature":"sig"},
      {"type":"redacted_thinking","data":"opaque"},
      {"type":"text","text":"Checking."},
      {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}},
      {"type":"tool_use","id":"toolu_2","name":"get_time","input":{}}]},
    {"role":"user","content":[
      {"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},
      {"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"noon"}],"is_error":false},
      {"type":"text","text":"Summarize."}]},
    {"role":"assistant","content":"Sunny at noon."},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3"}]}]})");
  json want = json::parse(R"([
    {"role":"user","content":[{"type":"text","text":"Weather?"},{"type":"text","text":"Paris."}]},
    {"role":"assistant","content":"Checking.","reasoning_content":"Need a tool.",
     "tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
                   {"id":"toolu_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"toolu_1","content":"sunny"},
    {"role":"tool","tool_call_id":"toolu_2","content":"noon"},
    {"role":"user","content":"Summarize."},
    {"role":"assistant","content":"Sunny at noon."},
    {"role":"tool","tool_call_id":"toolu_3","content":""}])");
  EXPECT_EQ(chat["messages"], want) << chat["messages"].dump(1);
}

TEST(MessagesToChat, ToolsToolChoiceThinkingStream) {
  json chat = ToChat(R"({"max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}],
    "tools":[{"name":"f","description":"d","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],
    "tool_choice":{"type":"any","disable_parallel_tool_use":true},
    "thinking":{"type":"enabled","budget_tokens":1024}})");
  EXPECT_EQ(chat["tools"], json::parse(R"([{"type":"function","function":
    {"name":"f","description":"d","parameters":{"type":"object"}}}])"));
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  auto choice = [](const char* tc) {
    return ToChat(std::string(R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"tool_choice":)") +
                  tc + "}")["tool_choice"];
  };
  EXPECT_EQ(choice(R"({"type":"auto"})"), "auto");
  EXPECT_EQ(choice(R"({"type":"none"})"), "none");
  EXPECT_EQ(choice(R"({"type":"tool","name":"f"})"),
            json::parse(R"({"type":"function","function":{"name":"f"}})"));
  json off = ToChat(R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"disabled"},
                        "chat_template_kwargs":{"custom":1},"logit_bias":{"5":100},"min_p":0.1,"seed":3})");
  EXPECT_EQ(off["chat_template_kwargs"], json::parse(R"({"custom":1,"enable_thinking":false})"));
  EXPECT_EQ(off["logit_bias"]["5"], 100);  // llama-server's extensions pass to the chat path
  EXPECT_EQ(off["min_p"], 0.1);
  EXPECT_EQ(off["seed"], 3);
}

TEST(MessagesToChat, CountTokensNeedsNoMaxTokens) {
  json chat = ToChat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true})",
                     MessagesCall::kCountTokens);
  EXPECT_FALSE(chat.contains("max_tokens"));
  EXPECT_FALSE(chat.contains("stream"));
  EXPECT_EQ(chat["messages"].size(), 1u);
}

TEST(MessagesToChat, BadInputNamesTheField) {
  struct Case { const char* body; const char* param; };
  const Case cases[] = {
      {R"("x")", ""},
      {R"({"max_tokens":8})", "messages"},
      {R"({"max_tokens":8,"messages":[]})", "messages"},
      {R"({"messages":[{"role":"user","content":"x"}]})", "max_tokens"},
      {R"({"max_tokens":8,"messages":[{"role":"tool","content":"x"}]})", "messages[0].role"},
      {R"({"max_tokens":8,"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})",
       "messages[0].content[0].source.type"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"document"}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f"}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens":8,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f"}]}]})",
       "messages[0].content[0].id"},
      {R"({"max_tokens":8,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":"x"}]}]})",
       "messages[0].content[0].input"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a",
          "content":[{"type":"image"}]}]}]})", "messages[0].content[0].content[0].source"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a",
          "content":[{"type":"document"}]}]}]})", "messages[0].content[0].content[0].type"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"system":5})", "system"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}]})",
       "tools[0].input_schema"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],
          "tools":[{"type":"web_search_20250305","name":"web_search"}]})", "tools[0].type"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"tool_choice":"auto"})", "tool_choice"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"some"}})",
       "tool_choice.type"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"tool"}})",
       "tool_choice.name"},
      {R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"maybe"}})",
       "thinking.type"},
  };
  for (const Case& c : cases) {
    std::string chat;
    auto e = MessagesToChat(c.body, MessagesCall::kCreate, &chat);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->kind, ErrorKind::kInvalidRequest) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body << " -> " << e->message;
  }
}

TEST(MessagesAdapter, ErrorsInTheAnthropicShape) {
  auto api = NewMessagesAdapter();
  json e = json::parse(api->ErrorBody(ApiError::Invalid("'stop' has more than 16 entries", "stop")));
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["message"], "'stop_sequences' has more than 16 entries");
  EXPECT_EQ(json::parse(AnthropicErrorBody({ErrorKind::kOverloaded, "busy", "", ""}))["error"]["type"],
            "overloaded_error");
  EXPECT_EQ(json::parse(AnthropicErrorBody({ErrorKind::kModelNotFound, "no", "", ""}))["error"]["type"],
            "not_found_error");
}

const char* kChatAnswer = R"({"id":"chatcmpl-abc","object":"chat.completion","created":7,"model":"tiny",
  "choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant",
    "reasoning_content":"think","content":"Let me check.",
    "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}],
  "usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,
           "prompt_tokens_details":{"cached_tokens":64}}})";

TEST(MessagesAdapter, FinalBodyHasEveryBlockAndCacheUsage) {
  json m = json::parse(NewMessagesAdapter()->FinalBody(kChatAnswer, {}));
  EXPECT_EQ(m["id"], "msg_abc");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "tiny");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  json want = json::parse(R"([{"type":"thinking","thinking":"think","signature":""},
    {"type":"text","text":"Let me check."},
    {"type":"tool_use","id":"call_1","name":"f","input":{"a":1}}])");
  EXPECT_EQ(m["content"], want);
  EXPECT_EQ(m["usage"], json::parse(R"({"input_tokens":36,"cache_creation_input_tokens":0,
    "cache_read_input_tokens":64,"output_tokens":20})"));
}

TEST(MessagesAdapter, StopReasons) {
  auto reason = [](const char* finish, AnswerEnd end = {}) {
    std::string chat = std::string(R"({"id":"chatcmpl-x","choices":[{"finish_reason":")") + finish +
                       R"(","message":{"role":"assistant","content":"a"}}],"usage":{}})";
    json m = json::parse(NewMessagesAdapter()->FinalBody(chat, end));
    EXPECT_EQ(m["stop_sequence"], end.stop_sequence.empty() ? json() : json(end.stop_sequence));
    return m["stop_reason"];
  };
  EXPECT_EQ(reason("stop"), "end_turn");
  EXPECT_EQ(reason("stop", {"END"}), "stop_sequence");
  EXPECT_EQ(reason("length"), "max_tokens");
  EXPECT_EQ(reason("tool_calls"), "tool_use");
}

std::vector<std::pair<std::string, json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    std::string ev = sse.substr(pos, end - pos);
    size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7)));
    EXPECT_EQ(out.back().first, out.back().second["type"]);
    pos = end + 2;
  }
  return out;
}

std::string Chunk(const std::string& delta, const std::string& finish = "") {
  json c = {{"id", "chatcmpl-s1"}, {"object", "chat.completion.chunk"}, {"created", 9},
            {"model", "tiny"}, {"usage", nullptr}};
  c["choices"] = json::array({{{"index", 0}, {"delta", json::parse(delta)},
                               {"finish_reason", finish.empty() ? json() : json(finish)}}});
  return c.dump();
}

const std::string kUsageChunk = R"({"id":"chatcmpl-s1","object":"chat.completion.chunk","choices":[],
  "usage":{"prompt_tokens":50,"completion_tokens":3,"total_tokens":53,"prompt_tokens_details":{"cached_tokens":32}}})";

std::vector<std::pair<std::string, json>> RunStream(const std::vector<std::string>& chunks,
                                                    const AnswerEnd& end = {}) {
  auto stream = NewMessagesAdapter()->NewStream({"tiny", 50});
  std::string sse;
  for (const std::string& c : chunks) sse += stream->OnChunk(c);
  return Events(sse + stream->OnEnd(end));
}

std::string Summary(const std::vector<std::pair<std::string, json>>& events) {
  std::string s;
  for (const auto& [name, data] : events) {
    s += name;
    if (data.contains("index")) s += "[" + data["index"].dump() + "]";
    if (data.contains("content_block")) s += ":" + data["content_block"]["type"].get<std::string>();
    if (data.contains("delta") && data["delta"].contains("type")) {
      s += ":" + data["delta"]["type"].get<std::string>();
    }
    s += " ";
  }
  return s;
}

TEST(MessagesStream, TextAnswer) {
  auto ev = RunStream({Chunk(R"({"role":"assistant","content":""})"), Chunk(R"({"content":"Hel"})"),
                       Chunk(R"({"content":"lo"})"), Chunk("{}", "stop"), kUsageChunk});
  EXPECT_EQ(Summary(ev),
            "message_start content_block_start[0]:text content_block_delta[0]:text_delta "
            "content_block_delta[0]:text_delta content_block_stop[0] message_delta message_stop ");
  json start = ev[0].second["message"];
  EXPECT_EQ(start["id"], "msg_s1");
  EXPECT_EQ(start["role"], "assistant");
  EXPECT_EQ(start["model"], "tiny");
  EXPECT_TRUE(start["content"].empty());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], 50);
  EXPECT_EQ(ev[2].second["delta"]["text"], "Hel");
  json delta = ev[5].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(delta["usage"]["output_tokens"], 3);
  EXPECT_EQ(delta["usage"]["input_tokens"], 18);
  EXPECT_EQ(delta["usage"]["cache_read_input_tokens"], 32);
  EXPECT_TRUE(delta["delta"]["stop_sequence"].is_null());

  auto stopped = RunStream({Chunk(R"({"content":"a"})"), Chunk("{}", "stop"), kUsageChunk}, {"END"});
  EXPECT_EQ(stopped[stopped.size() - 2].second["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(stopped[stopped.size() - 2].second["delta"]["stop_sequence"], "END");
}

TEST(MessagesStream, ThinkingThenText) {
  auto ev = RunStream({Chunk(R"({"role":"assistant","reasoning_content":"Hm"})"),
                       Chunk(R"({"reasoning_content":"m."})"), Chunk(R"({"content":"Yes"})"),
                       Chunk("{}", "stop"), kUsageChunk});
  EXPECT_EQ(Summary(ev),
            "message_start content_block_start[0]:thinking content_block_delta[0]:thinking_delta "
            "content_block_delta[0]:thinking_delta content_block_delta[0]:signature_delta "
            "content_block_stop[0] content_block_start[1]:text content_block_delta[1]:text_delta "
            "content_block_stop[1] message_delta message_stop ");
  EXPECT_EQ(ev[2].second["delta"]["thinking"], "Hm");
}

TEST(MessagesStream, ToolUse) {
  auto ev = RunStream({
      Chunk(R"({"role":"assistant","content":"Let me"})"),
      Chunk(R"({"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]})"),
      Chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]})"),
      Chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]})"),
      Chunk(R"({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]})"),
      Chunk("{}", "tool_calls"), kUsageChunk});
  EXPECT_EQ(Summary(ev),
            "message_start content_block_start[0]:text content_block_delta[0]:text_delta "
            "content_block_stop[0] content_block_start[1]:tool_use "
            "content_block_delta[1]:input_json_delta content_block_delta[1]:input_json_delta "
            "content_block_stop[1] content_block_start[2]:tool_use "
            "content_block_delta[2]:input_json_delta content_block_stop[2] message_delta "
            "message_stop ");
  json block = ev[4].second["content_block"];
  EXPECT_EQ(block["id"], "call_a");
  EXPECT_EQ(block["name"], "f");
  EXPECT_EQ(block["input"], json::object());
  EXPECT_EQ(ev[5].second["delta"]["partial_json"], "{\"x\":");
  EXPECT_EQ(ev[ev.size() - 2].second["delta"]["stop_reason"], "tool_use");
}

TEST(MessagesStream, ErrorEvent) {
  auto stream = NewMessagesAdapter()->NewStream({"tiny", 5});
  std::string sse = stream->OnChunk(Chunk(R"({"content":"a"})"));
  sse += stream->OnError({ErrorKind::kInternal, "decode failed", "", ""});
  auto ev = Events(sse);
  EXPECT_EQ(ev.back().first, "error");
  EXPECT_EQ(ev.back().second["error"]["type"], "api_error");
  EXPECT_EQ(ev.back().second["error"]["message"], "decode failed");
  EXPECT_EQ(ev[ev.size() - 2].first, "content_block_stop");
}

}  // namespace
}  // namespace prefixd::server

namespace prefixd::server {
namespace {

// A tool call's arguments keep the model's key order both ways (out as tool_use.input, back
// as the chat tool call's arguments), so the template re-renders the turn as it was generated.
TEST(MessagesAdapter, ToolUseInputKeepsTheKeyOrder) {
  auto m = nlohmann::ordered_json::parse(NewMessagesAdapter()->FinalBody(
      R"({"id":"chatcmpl-x","choices":[{"finish_reason":"tool_calls","message":{"role":"assistant",
      "content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f",
      "arguments":"{\"zeta\":1,\"alpha\":{\"y\":2,\"b\":3}}"}}]}}],"usage":{}})", {}));
  EXPECT_EQ(m["content"][0]["input"].dump(), R"({"zeta":1,"alpha":{"y":2,"b":3}})");
  std::string chat;
  ASSERT_FALSE(MessagesToChat(R"({"max_tokens":8,"messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"tool_use","id":"c","name":"f",
       "input":{"zeta":1,"alpha":{"y":2,"b":3}}}]}]})",
                              MessagesCall::kCreate, &chat));
  EXPECT_EQ(json::parse(chat)["messages"][1]["tool_calls"][0]["function"]["arguments"],
            R"({"zeta":1,"alpha":{"y":2,"b":3}})");
}

}  // namespace
}  // namespace prefixd::server
