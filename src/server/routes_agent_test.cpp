// /v1/responses, /v1/messages and /v1/messages/count_tokens end to end over a FakeBackend:
// the translation runs on the real chat path (validation, streaming, usage, errors).
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/api_messages.h"
#include "server/fake_backend.h"
#include "server/request_log.h"
#include "server/server.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;

class AgentRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetRequestLogEnabled(false);
    dir_ = std::filesystem::temp_directory_path() /
           ("prefixd-agent-routes-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto auth = TenantAuth::Create(Env::Default(), "", dir_.string());
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(*auth);
    ServerOptions opts;
    opts.port = 0;
    server_ = std::make_unique<HttpServer>(&backend_, auth_.get(), opts);
    auto port = server_->Bind();
    ASSERT_TRUE(port.ok());
    port_ = *port;
    thread_ = std::thread([this] { (void)server_->Serve(); });
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }

  httplib::Result Post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c.Post(path.c_str(), body, "application/json");
  }

  // (event name, data) of each event of an SSE body.
  static std::vector<std::pair<std::string, json>> Events(const std::string& body) {
    std::vector<std::pair<std::string, json>> out;
    size_t pos = 0;
    while ((pos = body.find("event: ", pos)) != std::string::npos) {
      size_t nl = body.find('\n', pos), end = body.find("\n\n", pos);
      out.emplace_back(body.substr(pos + 7, nl - pos - 7),
                       json::parse(body.substr(nl + 7, end - nl - 7)));
      pos = end;
    }
    return out;
  }

  FakeBackend backend_;
  std::unique_ptr<TenantAuth> auth_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::filesystem::path dir_;
  int port_ = 0;
};

TEST_F(AgentRoutesTest, ResponsesAnswerAndSecondTurnIsCached) {
  auto r = Post("/v1/responses", R"({"model":"fake-model","instructions":"sys","input":"hi"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body);
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["status"], "completed");
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "Hello, world!");
  EXPECT_EQ(body["usage"]["output_tokens"], 13);
  EXPECT_EQ(body["usage"]["input_tokens_details"]["cached_tokens"], 0);

  r = Post("/v1/responses", R"({"instructions":"sys","input":[{"role":"user","content":"hi"},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello, world!"}]},
    {"role":"user","content":"more"}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_GT(json::parse(r->body)["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0);
}

TEST_F(AgentRoutesTest, ResponsesStream) {
  auto r = Post("/v1/responses", R"({"input":"hi","stream":true,"max_output_tokens":5})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  auto ev = Events(r->body);
  ASSERT_GE(ev.size(), 6u);
  EXPECT_EQ(ev[0].first, "response.created");
  EXPECT_EQ(ev.back().first, "response.incomplete");  // max_output_tokens reached
  std::string text;
  for (const auto& [name, data] : ev) {
    if (name == "response.output_text.delta") text += data["delta"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello");
  json done = ev.back().second["response"];
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["usage"]["output_tokens"], 5);
  EXPECT_EQ(r->body.find("[DONE]"), std::string::npos);
}

TEST_F(AgentRoutesTest, ResponsesErrorsNameResponsesFields) {
  auto r = Post("/v1/responses", R"({"input":"hi","previous_response_id":"resp_1"})");
  ASSERT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "previous_response_id");
  r = Post("/v1/responses", R"({"input":"hi","max_output_tokens":0})");
  ASSERT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "max_output_tokens");
  r = Post("/v1/responses", R"({"input":"hi","model":"other"})");
  EXPECT_EQ(r->status, 404);
}

TEST_F(AgentRoutesTest, MessagesAnswerAndStream) {
  auto r = Post("/v1/messages", R"({"model":"fake-model","max_tokens":64,"system":"sys",
    "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  json m = json::parse(r->body);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["content"][0]["text"], "Hello, world!");
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_EQ(m["usage"]["output_tokens"], 13);

  r = Post("/v1/messages", R"({"max_tokens":64,"system":"sys","stream":true,
    "messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello, world!"},
                {"role":"user","content":"again"}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  auto ev = Events(r->body);
  ASSERT_GE(ev.size(), 5u);
  EXPECT_EQ(ev[0].first, "message_start");
  EXPECT_EQ(ev.back().first, "message_stop");
  std::string text;
  for (const auto& [name, data] : ev) {
    if (name == "content_block_delta") text += data["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello, world!");
  json delta = ev[ev.size() - 2].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_GT(delta["usage"]["cache_read_input_tokens"].get<int>(), 0);
}

TEST_F(AgentRoutesTest, MessagesErrorsInAnthropicShape) {
  auto r = Post("/v1/messages", R"({"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r->status, 400);
  json e = json::parse(r->body);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
  r = Post("/v1/messages", R"({"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error");
  backend_.queue_full = true;
  r = Post("/v1/messages", R"({"max_tokens":8,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "overloaded_error");
}

TEST_F(AgentRoutesTest, CountTokensCountsTheRenderedPrompt) {
  const std::string body = R"({"model":"fake-model","system":"sys","messages":[{"role":"user","content":"hi"}]})";
  auto r = Post("/v1/messages/count_tokens", body);
  ASSERT_EQ(r->status, 200) << r->body;
  int64_t n = json::parse(r->body)["input_tokens"];
  // The fake backend's tokens are the bytes of the rendered messages.
  std::string chat = R"([{"role":"system","content":"sys"},{"role":"user","content":"hi"}])";
  EXPECT_EQ(n, int64_t(chat.size()));
  r = Post("/v1/messages/count_tokens", R"({"messages":5})");
  ASSERT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["type"], "error");
}

}  // namespace
}  // namespace prefixd::server

namespace prefixd::server {
namespace {

TEST_F(AgentRoutesTest, MessagesStopSequence) {
  backend_.reply = "Hello END more";
  auto r = Post("/v1/messages", R"({"max_tokens":64,"stop_sequences":["END"],
    "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  json m = json::parse(r->body);
  EXPECT_EQ(m["content"][0]["text"], "Hello ");
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  r = Post("/v1/messages", R"({"max_tokens":64,"stop_sequences":["END"],"stream":true,
    "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  auto ev = Events(r->body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2].second["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(ev[ev.size() - 2].second["delta"]["stop_sequence"], "END");
}

}  // namespace
}  // namespace prefixd::server

namespace prefixd::server {
namespace {

TEST_F(AgentRoutesTest, ServerMadeErrorsOnMessagesRoutesInAnthropicShape) {
  httplib::Client c("127.0.0.1", port_);
  auto r = c.Get("/v1/messages");  // 405: the route exists for POST only
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  json e = json::parse(r->body);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  r = c.Get("/v1/chat/completions");  // other routes keep the OpenAI shape
  EXPECT_TRUE(json::parse(r->body)["error"].is_object());
  EXPECT_FALSE(json::parse(r->body).contains("type"));
}

TEST(AnthropicErrorFromOpenAi, MapsStatusesAndLeavesOtherBodies) {
  auto body = AnthropicErrorFromOpenAi(401, R"({"error":{"message":"bad key","type":"x"}})");
  ASSERT_TRUE(body);
  EXPECT_EQ(json::parse(*body), json::parse(R"({"type":"error","error":
    {"type":"authentication_error","message":"bad key"}})"));
  EXPECT_FALSE(AnthropicErrorFromOpenAi(400, R"({"type":"error","error":{"message":"m"}})"));
  EXPECT_FALSE(AnthropicErrorFromOpenAi(500, "not json"));
}

}  // namespace
}  // namespace prefixd::server
