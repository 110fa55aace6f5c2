// The Responses API translator: requests into chat bodies, chat answers into Response objects
// and the Responses event stream. No model, no HTTP.
#include "server/api_responses.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace prefixd::server {
namespace {

using json = nlohmann::json;

json ToChat(const std::string& body) {
  std::string chat;
  auto e = ResponsesToChat(body, &chat);
  EXPECT_FALSE(e) << (e ? e->message : "");
  return e ? json() : json::parse(chat);
}

ApiError Refused(const std::string& body) {
  std::string chat;
  auto e = ResponsesToChat(body, &chat);
  EXPECT_TRUE(e) << "accepted: " << chat;
  return e ? *e : ApiError{};
}

TEST(ResponsesToChat, StringInputAndInstructions) {
  json chat = ToChat(R"({"model":"m","instructions":"Be brief.","input":"Hi",
                         "max_output_tokens":16,"temperature":0.5,"top_p":0.9,"store":false})");
  EXPECT_EQ(chat["messages"], json::parse(R"([{"role":"system","content":"Be brief."},
                                              {"role":"user","content":"Hi"}])"));
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["max_tokens"], 16);
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["top_p"], 0.9);
  EXPECT_FALSE(chat.contains("stream"));
}

TEST(ResponsesToChat, EveryItemTypeOfAToolLoop) {
  json chat = ToChat(R"({"input":[
    {"role":"developer","content":"Use tools."},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather?"},
                                               {"type":"input_text","text":"In Paris."}]},
    {"type":"reasoning","id":"rs_1","summary":[],
     "content":[{"type":"reasoning_text","text":"Need the tool."}]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
    {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
    {"type":"function_call","call_id":"c2","name":"get_time","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"sunny"},
    {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"noon"}]},
    {"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"Answer now."}]},
    {"role":"assistant","content":"Sunny at noon."},
    {"role":"user","content":"Thanks"}]})");
  json want = json::parse(R"([
    {"role":"developer","content":"Use tools."},
    {"role":"user","content":[{"type":"text","text":"Weather?"},{"type":"text","text":"In Paris."}]},
    {"role":"assistant","content":"Checking.","reasoning_content":"Need the tool.",
     "tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
                   {"id":"c2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"sunny"},
    {"role":"tool","tool_call_id":"c2","content":"noon"},
    {"role":"assistant","content":"Sunny at noon.","reasoning_content":"Answer now."},
    {"role":"user","content":"Thanks"}])");
  EXPECT_EQ(chat["messages"], want) << chat["messages"].dump(1);
}

TEST(ResponsesToChat, EncryptedOnlyReasoningIsSkipped) {
  json chat = ToChat(R"({"input":[{"role":"user","content":"q"},
    {"type":"reasoning","summary":[],"encrypted_content":"opaque"},
    {"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]})");
  ASSERT_EQ(chat["messages"].size(), 2u);
  EXPECT_FALSE(chat["messages"][1].contains("reasoning_content"));
  EXPECT_EQ(chat["messages"][1]["tool_calls"][0]["id"], "c");
}

TEST(ResponsesToChat, ToolsToolChoiceFormatReasoningStream) {
  json chat = ToChat(R"({"input":"x","stream":true,"parallel_tool_calls":false,
    "tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true},
             {"type":"web_search"}],
    "tool_choice":{"type":"function","name":"f"},
    "reasoning":{"effort":"low","summary":"auto"},
    "text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true}}})");
  EXPECT_EQ(chat["tools"], json::parse(R"([{"type":"function","function":
    {"name":"f","description":"d","parameters":{"type":"object"}}}])"));
  EXPECT_EQ(chat["tool_choice"], json::parse(R"({"type":"function","function":{"name":"f"}})"));
  EXPECT_EQ(chat["reasoning_effort"], "low");
  EXPECT_EQ(chat["response_format"], json::parse(R"({"type":"json_schema","json_schema":
    {"name":"out","schema":{"type":"object"},"strict":true}})"));
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(ToChat(R"({"input":"x","tool_choice":"required"})")["tool_choice"], "required");
  EXPECT_EQ(ToChat(R"({"input":"x","text":{"format":{"type":"json_object"}}})")["response_format"],
            json::parse(R"({"type":"json_object"})"));
  EXPECT_FALSE(ToChat(R"({"input":"x","text":{"format":{"type":"text"}}})").contains("response_format"));
  json ext = ToChat(R"({"input":"x","top_k":4,"logit_bias":{"7":-100},"enable_thinking":false,
                        "chat_template_kwargs":{"a":1}})");
  EXPECT_EQ(ext["top_k"], 4);  // llama-server's extensions pass to the chat path
  EXPECT_EQ(ext["logit_bias"]["7"], -100);
  EXPECT_EQ(ext["enable_thinking"], false);
  EXPECT_EQ(ext["chat_template_kwargs"]["a"], 1);
}

TEST(ResponsesToChat, BadInputNamesTheField) {
  struct Case { const char* body; const char* param; };
  const Case cases[] = {
      {R"([])", ""},
      {R"({"model":"m"})", "input"},
      {R"({"input":5})", "input"},
      {R"({"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]})",
       "input[0].content[0].type"},
      {R"({"input":[{"role":"user","content":[{"type":"input_image"}]}]})",
       "input[0].content[0].image_url"},
      {R"({"input":[{"role":"user","content":[{"type":"input_text"}]}]})", "input[0].content[0].text"},
      {R"({"input":[{"role":"robot","content":"x"}]})", "input[0].role"},
      {R"({"input":[{"type":"function_call","call_id":"c","name":"f"}]})", "input[0].arguments"},
      {R"({"input":[{"type":"function_call_output","call_id":"c","output":3}]})", "input[0].output"},
      {R"({"input":[{"type":"item_reference","id":"x"}]})", "input[0].type"},
      {R"({"input":[{"type":"computer_call"}]})", "input[0].type"},
      {R"({"input":"x","previous_response_id":"resp_1"})", "previous_response_id"},
      {R"({"input":"x","conversation":"c"})", "conversation"},
      {R"({"input":"x","background":true})", "background"},
      {R"({"input":"x","store":"yes"})", "store"},
      {R"({"input":"x","tools":{}})", "tools"},
      {R"({"input":"x","tools":[{"type":"function"}]})", "tools[0].name"},
      {R"({"input":"x","tool_choice":{"type":"file_search"}})", "tool_choice.type"},
      {R"({"input":"x","text":{"format":{"type":"xml"}}})", "text.format.type"},
      {R"({"input":"x","reasoning":"high"})", "reasoning"},
  };
  for (const Case& c : cases) {
    ApiError e = Refused(c.body);
    EXPECT_EQ(e.kind, ErrorKind::kInvalidRequest) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

const char* kChatAnswer = R"({"id":"chatcmpl-abc","object":"chat.completion","created":7,"model":"tiny",
  "choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant",
    "reasoning_content":"think","content":"Let me check.",
    "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}],
  "usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,
           "prompt_tokens_details":{"cached_tokens":64}},"timings":{"cache_n":64}})";

TEST(ResponsesAdapter, FinalBodyHasEveryOutputItemAndUsage) {
  json r = json::parse(NewResponsesAdapter()->FinalBody(kChatAnswer, {}));
  EXPECT_EQ(r["id"], "resp_abc");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["created_at"], 7);
  EXPECT_EQ(r["model"], "tiny");
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0], json::parse(R"({"type":"reasoning_text","text":"think"})"));
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_EQ(r["output"][1]["role"], "assistant");
  EXPECT_EQ(r["output"][1]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Let me check.");
  EXPECT_EQ(r["output"][2]["type"], "function_call");
  EXPECT_EQ(r["output"][2]["call_id"], "call_1");
  EXPECT_EQ(r["output"][2]["name"], "f");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"a\":1}");
  EXPECT_EQ(r["usage"], json::parse(R"({"input_tokens":100,"input_tokens_details":{"cached_tokens":64},
    "output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":120})"));
  EXPECT_EQ(r["timings"]["cache_n"], 64);
}

TEST(ResponsesAdapter, LengthIsIncompleteAndEmptyAnswerIsAnEmptyMessage) {
  json r = json::parse(NewResponsesAdapter()->FinalBody(R"({"id":"chatcmpl-x","choices":[
    {"finish_reason":"length","message":{"role":"assistant","content":""}}],"usage":{}})", {}));
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
}

TEST(ResponsesAdapter, ErrorsNameTheResponsesParameters) {
  json e = json::parse(NewResponsesAdapter()->ErrorBody(
      ApiError::Invalid("'max_tokens' must be between 1 and 2048, got 0", "max_tokens")));
  EXPECT_EQ(e["error"]["param"], "max_output_tokens");
  EXPECT_EQ(e["error"]["message"], "'max_output_tokens' must be between 1 and 2048, got 0");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
}

// Splits SSE text into (event name, data) pairs, checking the framing.
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

std::vector<std::pair<std::string, json>> RunStream(const std::vector<std::string>& chunks) {
  auto stream = NewResponsesAdapter()->NewStream({"tiny", 50});
  std::string sse;
  for (const std::string& c : chunks) sse += stream->OnChunk(c);
  sse += stream->OnEnd({});
  auto events = Events(sse);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].first, events[i].second["type"]);
    EXPECT_EQ(events[i].second["sequence_number"], i);
  }
  return events;
}

std::vector<std::string> Names(const std::vector<std::pair<std::string, json>>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.first);
  return out;
}

TEST(ResponsesStream, TextAnswer) {
  auto ev = RunStream({Chunk(R"({"role":"assistant","content":""})"), Chunk(R"({"content":"Hel"})"),
                       Chunk(R"({"content":"lo"})"), Chunk("{}", "stop"), kUsageChunk});
  std::vector<std::string> want = {
      "response.created", "response.in_progress", "response.output_item.added",
      "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(Names(ev), want);
  EXPECT_EQ(ev[0].second["response"]["id"], "resp_s1");
  EXPECT_EQ(ev[0].second["response"]["status"], "in_progress");
  EXPECT_EQ(ev[2].second["item"]["type"], "message");
  EXPECT_EQ(ev[4].second["delta"], "Hel");
  EXPECT_EQ(ev[4].second["item_id"], "msg_s1");
  EXPECT_EQ(ev[4].second["output_index"], 0);
  EXPECT_EQ(ev[4].second["content_index"], 0);
  EXPECT_EQ(ev[6].second["text"], "Hello");
  EXPECT_EQ(ev[7].second["part"]["text"], "Hello");
  EXPECT_EQ(ev[8].second["item"]["content"][0]["text"], "Hello");
  json done = ev[9].second["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["usage"]["input_tokens"], 50);
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(done["usage"]["output_tokens"], 3);
}

TEST(ResponsesStream, ReasoningThenText) {
  auto ev = RunStream({Chunk(R"({"role":"assistant","reasoning_content":"Hm"})"),
                       Chunk(R"({"reasoning_content":"m."})"), Chunk(R"({"content":"Yes"})"),
                       Chunk("{}", "stop"), kUsageChunk});
  std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(Names(ev), want);
  EXPECT_EQ(ev[2].second["item"]["type"], "reasoning");
  EXPECT_EQ(ev[5].second["text"], "Hmm.");
  EXPECT_EQ(ev[6].second["item"]["content"][0]["text"], "Hmm.");
  EXPECT_EQ(ev[7].second["output_index"], 1);
  EXPECT_EQ(ev[9].second["output_index"], 1);
  json out = ev.back().second["response"]["output"];
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[1]["content"][0]["text"], "Yes");
}

TEST(ResponsesStream, ToolCalls) {
  auto ev = RunStream({
      Chunk(R"({"role":"assistant","content":""})"),
      Chunk(R"({"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]})"),
      Chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]})"),
      Chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]})"),
      Chunk(R"({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]})"),
      Chunk("{}", "tool_calls"), kUsageChunk});
  std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(Names(ev), want);
  EXPECT_EQ(ev[2].second["item"]["type"], "function_call");
  EXPECT_EQ(ev[2].second["item"]["call_id"], "call_a");
  EXPECT_EQ(ev[2].second["item"]["name"], "f");
  EXPECT_EQ(ev[3].second["item_id"], "fc_call_a");
  EXPECT_EQ(ev[5].second["arguments"], "{\"x\":1}");
  EXPECT_EQ(ev[7].second["output_index"], 1);
  json out = ev.back().second["response"]["output"];
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["arguments"], "{\"x\":1}");
  EXPECT_EQ(out[1]["call_id"], "call_b");
  EXPECT_EQ(out[1]["arguments"], "{}");
}

TEST(ResponsesStream, LengthEndsIncompleteAndErrorsFail) {
  auto ev = RunStream({Chunk(R"({"content":"a"})"), Chunk("{}", "length"), kUsageChunk});
  EXPECT_EQ(ev.back().first, "response.incomplete");
  EXPECT_EQ(ev.back().second["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(ev.back().second["response"]["output"][0]["status"], "incomplete");

  auto stream = NewResponsesAdapter()->NewStream({"tiny", 5});
  std::string sse = stream->OnChunk(Chunk(R"({"content":"a"})"));
  sse += stream->OnError({ErrorKind::kInternal, "decode failed", "", "internal_error"});
  auto failed = Events(sse);
  EXPECT_EQ(failed.back().first, "response.failed");
  EXPECT_EQ(failed.back().second["response"]["status"], "failed");
  EXPECT_EQ(failed.back().second["response"]["error"]["message"], "decode failed");
  EXPECT_EQ(failed[failed.size() - 2].first, "response.output_item.done");
}

}  // namespace
}  // namespace prefixd::server
