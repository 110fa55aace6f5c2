// What the routers built for vLLM and SGLang read of prefixd, over a FakeBackend: the render
// routes answer exactly the tokens a completion with the same body evaluates (and its errors),
// /version and /v1/models answer what SMG registers a worker by, and /metrics carries vLLM's
// gauges with vLLM's meanings.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/fake_backend.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/server.h"
#include "server/test_images.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;

// A FakeBackend that counts the chats it rendered.
class CountingBackend : public FakeBackend {
 public:
  using FakeBackend::PrepareChat;
  Result<Prompt> PrepareChat(const std::string& messages_json,
                             const engine::ChatRenderOptions& options) const override {
    ++chats_rendered;
    return FakeBackend::PrepareChat(messages_json, options);
  }
  mutable std::atomic<int> chats_rendered{0};
};

class RouterProtocolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetRequestLogEnabled(false);
    dir_ = std::filesystem::temp_directory_path() /
           ("prefixd-router-protocols-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    backend_.n_ctx = 512;
  }
  // `key_file`: "" for no keys.
  void Start(ImageMode images = ImageMode::kStandIn, const std::string& key_file = "") {
    auth_ = TenantAuth::Create(Env::Default(), AuthOptions{key_file, "", dir_.string()}).value();
    ServerOptions o;
    o.port = 0;
    o.images.mode = images;
    server_ = std::make_unique<HttpServer>(&backend_, auth_.get(), o);
    port_ = server_->Bind().value();
    thread_ = std::thread([this] { (void)server_->Serve(); });
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }

  httplib::Result Post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c.Post(path.c_str(), body.dump(), "application/json");
  }
  httplib::Result Get(const std::string& path) {
    httplib::Client c("127.0.0.1", port_);
    return c.Get(path.c_str());
  }

  CountingBackend backend_;
  std::unique_ptr<TenantAuth> auth_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::filesystem::path dir_;
  int port_ = 0;
};

const json kTool = {{"type", "function"},
                    {"function",
                     {{"name", "clock"},
                      {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}};

json Chat() {
  return {{"model", "fake-model"},
          {"messages",
           {{{"role", "system"}, {"content", "You keep time."}},
            {{"role", "user"}, {"content", "What time is it?"}},
            {{"role", "assistant"}, {"content", "Noon."}},
            {{"role", "user"}, {"content", "And now?"}}}},
          {"tools", {kTool}},
          {"temperature", 0.5},
          {"max_tokens", 7}};
}

TEST_F(RouterProtocolsTest, ChatRenderIsThePromptTheCompletionEvaluates) {
  Start();
  auto r = Post("/v1/chat/completions/render", Chat());
  ASSERT_EQ(r->status, 200) << r->body;
  const json g = json::parse(r->body);
  const auto ids = g["token_ids"].get<std::vector<int>>();
  auto c = Post("/v1/chat/completions", Chat());
  ASSERT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(json::parse(c->body)["usage"]["prompt_tokens"], ids.size());
  // The fake's tokens are the bytes of the messages and the tools: the tools were rendered.
  const std::string text(ids.begin(), ids.end());
  EXPECT_NE(text.find("\"clock\""), std::string::npos) << text;
  EXPECT_NE(text.find("And now?"), std::string::npos) << text;
  EXPECT_EQ(g["request_id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(g["model"], "fake-model");
  EXPECT_EQ(g["sampling_params"]["max_tokens"], 7);
  EXPECT_EQ(g["sampling_params"]["temperature"], 0.5);
  EXPECT_EQ(g["stream"], false);
  EXPECT_TRUE(g["features"].is_null());
}

TEST_F(RouterProtocolsTest, RenderClampsMaxTokensAsTheCompletionWould) {
  Start();
  json body = Chat();
  body.erase("max_tokens");
  auto r = Post("/v1/chat/completions/render", body);
  ASSERT_EQ(r->status, 200) << r->body;
  const json g = json::parse(r->body);
  EXPECT_EQ(g["sampling_params"]["max_tokens"], 512 - g["token_ids"].size());
}

TEST_F(RouterProtocolsTest, CompletionsRenderIsAListOfOnePerPrompt) {
  Start();
  auto r = Post("/v1/completions/render", {{"prompt", "Once upon"}});
  ASSERT_EQ(r->status, 200) << r->body;
  json list = json::parse(r->body);
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["token_ids"], json({'O', 'n', 'c', 'e', ' ', 'u', 'p', 'o', 'n'}));
  EXPECT_EQ(list[0]["request_id"].get<std::string>().rfind("cmpl-", 0), 0u);
  r = Post("/v1/completions/render", {{"prompt", {5, 6, 7}}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)[0]["token_ids"], json({5, 6, 7}));
}

// Each bad body gets the status and error code the completion route answers it with.
TEST_F(RouterProtocolsTest, RenderRefusesWhatTheCompletionRefusesInItsWords) {
  Start();
  const std::string long_text(600, 'x');  // the fake: one token per byte, past 512
  const std::vector<std::pair<std::string, json>> cases = {
      {"/v1/chat/completions", {{"model", "other-model"}, {"messages", Chat()["messages"]}}},
      {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", long_text}}}}}},
      {"/v1/chat/completions", {{"messages", "not a list"}}},
      {"/v1/completions", {{"prompt", {"two", "prompts"}}}},
      {"/v1/completions", {{"prompt", long_text}}},
  };
  for (const auto& [path, body] : cases) {
    auto done = Post(path, body);
    auto render = Post(path + "/render", body);
    ASSERT_TRUE(done && render);
    EXPECT_GE(render->status, 400) << render->body;
    EXPECT_EQ(render->status, done->status) << path << " " << body.dump();
    EXPECT_EQ(json::parse(render->body)["error"]["code"], json::parse(done->body)["error"]["code"])
        << render->body;
  }
}

TEST_F(RouterProtocolsTest, ImagesAModelReadsAreRefusedBeforeTheRender) {
  Start(ImageMode::kRead);
  const json image = {{"type", "image_url"},
                      {"image_url", {{"url", test_images::DataUrl(test_images::Png(8, 8))}}}};
  json body = {{"messages",
                {{{"role", "user"},
                  {"content", {{{"type", "text"}, {"text", "What is it?"}}, image}}}}}};
  auto r = Post("/v1/chat/completions/render", body);
  ASSERT_EQ(r->status, 400) << r->body;
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "image_not_supported");
  EXPECT_NE(e["message"].get<std::string>().find("render"), std::string::npos) << e.dump();
  EXPECT_EQ(backend_.chats_rendered.load(), 0);
}

TEST_F(RouterProtocolsTest, ImageStandInsRenderAsTheCompletionEvaluatesThem) {
  Start(ImageMode::kStandIn);
  const json image = {{"type", "image_url"},
                      {"image_url", {{"url", test_images::DataUrl(test_images::Png(8, 8))}}}};
  json body = {{"messages", {{{"role", "user"}, {"content", {image}}}}}, {"max_tokens", 2}};
  auto r = Post("/v1/chat/completions/render", body);
  ASSERT_EQ(r->status, 200) << r->body;
  auto c = Post("/v1/chat/completions", body);
  ASSERT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(json::parse(c->body)["usage"]["prompt_tokens"],
            json::parse(r->body)["token_ids"].size());
}

TEST_F(RouterProtocolsTest, RenderNeedsAKeyWhenKeysAreOn) {
  const std::string keys = (dir_ / "keys").string();
  std::ofstream(keys) << "key-a\n";
  Start(ImageMode::kStandIn, keys);
  auto r = Post("/v1/chat/completions/render", Chat());
  EXPECT_EQ(r->status, 401) << r->body;
  httplib::Client c("127.0.0.1", port_);
  auto ok = c.Post("/v1/chat/completions/render", {{"Authorization", "Bearer key-a"}},
                   Chat().dump(), "application/json");
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// SMG registers an HTTP worker whose /v1/models owned_by it does not know when /version
// answers (it then reads it as vLLM-compatible), and takes model_path from the entry's root.
TEST_F(RouterProtocolsTest, SmgFindsVersionAndTheModelsRoot) {
  Start();
  auto v = Get("/version");
  ASSERT_EQ(v->status, 200) << v->body;
  EXPECT_TRUE(json::parse(v->body)["version"].is_string());
  const json m = json::parse(Get("/v1/models")->body)["data"][0];
  EXPECT_EQ(m["id"], "fake-model");
  EXPECT_EQ(m["root"], "fake-model");
  EXPECT_EQ(m["owned_by"], "prefixd");
  EXPECT_EQ(m["max_model_len"], 512);
}

TEST_F(RouterProtocolsTest, MetricsCarryVllmGaugesWithTheModelName) {
  Start();
  const std::string page = Get("/metrics")->body;
  // The fake's slots: one busy with 40 prompt tokens, one idle; 512 cells each.
  const std::string l = "{model_name=\"fake-model\",engine=\"0\"}";
  for (const std::string line :
       {"vllm:num_requests_running" + l + " 0\n", "vllm:num_requests_waiting" + l + " 0\n",
        "vllm:kv_cache_usage_perc" + l + " 0.0390625\n",
        "vllm:prefix_cache_queries_total" + l + " 0\n",
        std::string("# TYPE vllm:kv_cache_usage_perc gauge\n")}) {
    EXPECT_NE(page.find(line), std::string::npos) << line;
  }
  EXPECT_NE(page.find("vllm:cache_config_info{model_name=\"fake-model\",engine=\"0\","
                      "block_size=\"16\",num_gpu_blocks=\"64\",kv_cache_size_tokens=\"1024\","),
            std::string::npos)
      << page.substr(page.find("vllm:cache_config_info"));
}

TEST(KvCacheUsage, CountsTheRunningRequestsCellsOnly) {
  engine::EngineStats s;
  s.slots = {engine::SlotView{true, 100, "", ""}, engine::SlotView{false, 300, "", ""},
             engine::SlotView{true, 900, "", ""}};
  // 100 + 200 (capped at the slot's cells) of 3 x 200; the idle slot's 300 are cache.
  EXPECT_DOUBLE_EQ(KvCacheUsage(s, 200), 300.0 / 600.0);
  EXPECT_DOUBLE_EQ(KvCacheUsage(engine::EngineStats{}, 200), 0.0);
}

}  // namespace
}  // namespace prefixd::server
