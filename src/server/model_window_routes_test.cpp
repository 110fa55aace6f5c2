// What a client reads of the model's window: /v1/models under every name clients look for,
// and a prompt past the window refused in the words each API's clients compact on.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "server/fake_backend.h"
#include "server/request_log.h"
#include "server/server.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;

class ModelWindowRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetRequestLogEnabled(false);
    auth_ = TenantAuth::Create(Env::Default(), AuthOptions{}).value();
    backend_.n_ctx = 256;
    ServerOptions o;
    o.port = 0;
    server_ = std::make_unique<HttpServer>(&backend_, auth_.get(), o);
    port_ = server_->Bind().value();
    thread_ = std::thread([this] { (void)server_->Serve(); });
  }
  void TearDown() override {
    server_->Stop();
    thread_.join();
  }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", port_); }

  FakeBackend backend_;
  std::unique_ptr<TenantAuth> auth_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(ModelWindowRoutesTest, ModelsSayTheWindowAsEachClientReadsIt) {
  auto r = Client().Get("/v1/models/fake-model");
  ASSERT_EQ(r->status, 200);
  const json m = json::parse(r->body);
  EXPECT_EQ(m["max_input_tokens"], 256);  // Anthropic Models API (Claude Code's discovery)
  EXPECT_EQ(m["max_tokens"], 128);        // never more than half the window
  EXPECT_EQ(m["type"], "model");
  EXPECT_EQ(m["display_name"], "fake-model");
  EXPECT_TRUE(m["created_at"].get<std::string>().find('T') != std::string::npos);
  for (const char* name : {"context_window", "context_length", "max_model_len"}) {
    EXPECT_EQ(m[name], 256) << name;
  }
  EXPECT_EQ(json::parse(Client().Get("/v1/models")->body)["data"][0]["max_input_tokens"], 256);
}

TEST_F(ModelWindowRoutesTest, APromptPastTheWindowIsRefusedInEachClientsWords) {
  const std::string text(400, 'x');  // the fake: one token per byte
  auto chat = Client().Post(
      "/v1/chat/completions",
      json{{"messages", {{{"role", "user"}, {"content", text}}}}}.dump(), "application/json");
  ASSERT_EQ(chat->status, 400);
  const json e = json::parse(chat->body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_NE(e["message"].get<std::string>().find("maximum context length is 256 tokens"),
            std::string::npos);
  auto msg = Client().Post(
      "/v1/messages",
      json{{"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", text}}}}}.dump(),
      "application/json");
  ASSERT_EQ(msg->status, 400);
  const json a = json::parse(msg->body);
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "invalid_request_error");
  // Claude Code compacts on this sentence and reads both numbers from it.
  const std::string said = a["error"]["message"];
  EXPECT_EQ(said.rfind("prompt is too long: ", 0), 0u) << said;
  EXPECT_NE(said.find(" tokens > 256 maximum"), std::string::npos) << said;
}

}  // namespace
}  // namespace prefixd::server
