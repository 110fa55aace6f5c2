// The HTTP server end to end over a FakeBackend: routes, streaming, errors, auth, disconnects.
#include "server/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/fake_backend.h"
#include "server/request_log.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { SetRequestLogEnabled(getenv("PREFIXD_TEST_LOG") != nullptr); }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void Start(const std::string& key_file = "", const std::string& admin_key_file = "",
             size_t max_admitted = 0) {
    dir_ = std::filesystem::temp_directory_path() /
           ("prefixd-server-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto auth =
        TenantAuth::Create(Env::Default(), AuthOptions{key_file, admin_key_file, dir_.string()});
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(*auth);
    ServerOptions opts;
    opts.port = 0;
    opts.max_body_bytes = 4096;
    opts.max_admitted = max_admitted;
    opts.aliases = aliases_;
    server_ = std::make_unique<HttpServer>(&backend_, auth_.get(), opts);
    auto port = server_->Bind();
    ASSERT_TRUE(port.ok());
    port_ = *port;
    thread_ = std::thread([this] { (void)server_->Serve(); });
  }

  httplib::Client Client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
    return Client().Post(path.c_str(), headers, body, "application/json");
  }

  // A raw socket connected to the server, with `bytes` sent on it.
  int ConnectAndSend(const std::string& bytes) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port_));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
    return fd;
  }

  // Sends `request` on a raw socket, reads until `stop_after` is seen (or EOF), closes.
  std::string RawExchange(const std::string& request, const std::string& stop_after) {
    int fd = ConnectAndSend(request);
    std::string got;
    char buf[4096];
    while (!stop_after.empty() && got.find(stop_after) == std::string::npos) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, size_t(n));
    }
    close(fd);
    return got;
  }

  static std::string HttpPost(const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  // The data payloads of an SSE body.
  static std::vector<std::string> SseEvents(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      size_t end = body.find("\n\n", pos);
      out.push_back(body.substr(pos + 6, end - pos - 6));
      pos = end;
    }
    return out;
  }

  static void ExpectError(const httplib::Result& r, int status, const std::string& param = "",
                          const std::string& code = "") {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    json body = json::parse(r->body);
    ASSERT_TRUE(body["error"].is_object()) << r->body;
    EXPECT_TRUE(body["error"]["message"].is_string());
    EXPECT_TRUE(body["error"]["type"].is_string());
    if (!param.empty()) EXPECT_EQ(body["error"]["param"], param) << r->body;
    if (!code.empty()) EXPECT_EQ(body["error"]["code"], code) << r->body;
  }

  FakeBackend backend_;
  std::unique_ptr<TenantAuth> auth_;
  std::vector<std::string> aliases_;  // ServerOptions::aliases of the next Start()
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::filesystem::path dir_;
  int port_ = 0;
};

const char* kChat = R"({"model":"fake-model","messages":[{"role":"user","content":"hi"}]})";

TEST_F(ServerTest, ChatCompletion) {
  Start();
  auto r = Post("/v1/chat/completions", kChat);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello, world!");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_GT(body["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(body["usage"]["completion_tokens"], 13);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_TRUE(body["timings"]["prompt_ms"].is_number());
}

TEST_F(ServerTest, ChatOptionsReachTheTemplate) {
  Start();
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],)"
                R"("tools":[{"type":"function","function":{"name":"f"}}],)"
                R"("tool_choice":{"type":"function","function":{"name":"f"}},)"
                R"("parallel_tool_calls":true,"chat_template_kwargs":{"k":1},)"
                R"("reasoning_effort":"high","response_format":{"type":"json_object"}})");
  ASSERT_EQ(r->status, 200) << r->body;
  const engine::ChatRenderOptions& o = backend_.last_options;
  EXPECT_EQ(o.tool_name, "f");
  EXPECT_TRUE(o.parallel_tool_calls);
  EXPECT_NE(o.tools_json.find("\"f\""), std::string::npos);
  EXPECT_EQ(o.template_kwargs.at("k"), "1");
  EXPECT_EQ(o.template_kwargs.at("reasoning_effort"), "\"high\"");
  EXPECT_EQ(o.json_schema, R"({"type":"object"})");
  EXPECT_TRUE(o.add_generation_prompt);
}

TEST_F(ServerTest, WarmAndApplyTemplateRenderAsTheChatDoes) {
  Start();
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],)"
                           R"("enable_thinking":false,"chat_template_kwargs":{"k":2}})";
  ASSERT_EQ(Post("/apply-template", body)->status, 200);
  EXPECT_FALSE(backend_.last_options.enable_thinking);
  EXPECT_EQ(backend_.last_options.template_kwargs.at("k"), "2");
  backend_.last_options = {};
  ASSERT_EQ(Post("/v1/cache/warm", body)->status, 200);
  EXPECT_FALSE(backend_.last_options.enable_thinking);
  ExpectError(Post("/v1/cache/warm", R"({"messages":[{"role":"user","content":"hi"}],)"
                                     R"("reasoning_effort":1})"),
              400, "reasoning_effort");
}

TEST_F(ServerTest, TemplateStopsAndGrammarReachTheEngine) {
  backend_.output.additional_stops = {"<|im_end|>", "a"};
  backend_.output.grammar.kind = engine::GrammarKind::kToolCalls;
  backend_.output.grammar.gbnf = "root ::= \"x\"";
  Start();
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],"stop":["a"]})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(backend_.last_stop(), (std::vector<std::string>{"a", "<|im_end|>"}));
  EXPECT_EQ(backend_.last_grammar(), "root ::= \"x\"");
}

TEST_F(ServerTest, LogprobsFollowOpenAi) {
  Start();
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2,)"
                R"("logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(r->status, 200) << r->body;
  json content = json::parse(r->body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "H");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"], json::array({72}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "b");
  auto plain = Post("/v1/chat/completions", kChat);
  EXPECT_TRUE(json::parse(plain->body)["choices"][0]["logprobs"].is_null());
}

TEST_F(ServerTest, SecondTurnReportsCachedTokens) {
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]})");
  ASSERT_EQ(r->status, 200);
  EXPECT_GT(json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

TEST_F(ServerTest, MaxTokensGivesLength) {
  Start();
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3})");
  ASSERT_EQ(r->status, 200);
  json body = json::parse(r->body);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hel");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerTest, StreamWithUsage) {
  Start();
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],"stream":true,)"
                R"("stream_options":{"include_usage":true}})");
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  auto events = SseEvents(r->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  json first = json::parse(events[0]);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  for (size_t i = 0; i + 3 < events.size(); ++i) {
    json e = json::parse(events[i]);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_TRUE(e["usage"].is_null());
    text += e["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello, world!");
  json finish = json::parse(events[events.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 13);
  EXPECT_TRUE(usage["usage"]["prompt_tokens_details"]["cached_tokens"].is_number());
}

TEST_F(ServerTest, StreamKeepsMultiByteCharactersWhole) {
  backend_.reply = "h\xC3\xA9llo \xE2\x82\xAC!";  // é and € split over byte pieces
  Start();
  auto r = Post("/v1/completions", R"({"prompt":"x","stream":true})");
  ASSERT_EQ(r->status, 200);
  std::string text;
  for (const std::string& e : SseEvents(r->body)) {
    if (e == "[DONE]") continue;
    json j = json::parse(e);  // throws on invalid UTF-8 replaced badly
    EXPECT_EQ(j["object"], "text_completion");
    text += j["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, backend_.reply);
}

TEST_F(ServerTest, TextCompletion) {
  Start();
  auto r = Post("/v1/completions", R"({"prompt":"abc","max_tokens":5})");
  ASSERT_EQ(r->status, 200);
  json body = json::parse(r->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "Hello");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3);
  r = Post("/v1/completions", R"({"prompt":[97,98,99],"max_tokens":1})");
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST_F(ServerTest, BadInputGetsOpenAiErrors) {
  Start();
  ExpectError(Post("/v1/chat/completions", "{not json"), 400);
  ExpectError(Post("/v1/chat/completions", "[1,2]"), 400);
  ExpectError(Post("/v1/chat/completions", R"({"model":"fake-model"})"), 400, "messages");
  ExpectError(Post("/v1/chat/completions", R"({"messages":"hi"})"), 400, "messages");
  ExpectError(Post("/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})"),
              400, "messages");
  ExpectError(Post("/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})"),
              400, "temperature");
  ExpectError(Post("/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"x"}],"temperature":3})"),
              400, "temperature");
  ExpectError(Post("/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})"),
              400, "max_tokens");
  ExpectError(Post("/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"x"}],"max_tokens":100000})"),
              400, "max_tokens");
  ExpectError(Post("/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"x"}],"stream_options":{}})"),
              400, "stream_options");
  ExpectError(Post("/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"bad-template"}]})"), 400);
  ExpectError(Post("/v1/chat/completions",
                   R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})"),
              404, "model", "model_not_found");
  std::string long_text(300, 'a');
  ExpectError(Post("/v1/completions", R"({"prompt":")" + long_text + R"("})"), 400, "prompt",
              "context_length_exceeded");
  ExpectError(Post("/v1/completions", R"({"prompt":[1,2,999]})"), 400, "prompt");
  ExpectError(Post("/v1/completions", R"({"prompt":")" + std::string(5000, 'a') + R"("})"), 413);
  ExpectError(Post("/v1/chat/completions", std::string(100, '[') + std::string(100, ']')), 400);
  ExpectError(Client().Get("/v1/nothing"), 404);
  ExpectError(Client().Get("/v1/chat/completions"), 405);
  EXPECT_EQ(backend_.completions, 0);
}

TEST_F(ServerTest, FullQueueGets503WithRetryAfter) {
  backend_.queue_full = true;
  Start();
  auto r = Post("/v1/chat/completions", kChat);
  ExpectError(r, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  auto s = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"x"}],"stream":true})");
  ExpectError(s, 503);
}

// The names agents ask for by default (Claude Code's claude-*, Codex's gpt-*) are served through
// pattern aliases; /v1/models lists only names a client can pick, the patterns in the model's
// own entry.
TEST_F(ServerTest, PatternAliasesServeTheNamesAgentsAskFor) {
  aliases_ = {"local-fast", "claude-*", "gpt-?.?"};
  Start();
  for (const char* m : {"fake-model", "local-fast", "claude-sonnet-4-5", "claude-haiku-4-5", "gpt-5.1"}) {
    auto r = Post("/v1/chat/completions",
                  std::string(R"({"model":")") + m + R"(","messages":[{"role":"user","content":"x"}]})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << m;
    EXPECT_EQ(json::parse(r->body)["model"], m);
  }
  ExpectError(Post("/v1/chat/completions",
                   R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})"),
              404, "model", "model_not_found");
  auto models = json::parse(Client().Get("/v1/models")->body);
  ASSERT_EQ(models["data"].size(), 2u);  // fake-model and local-fast
  EXPECT_EQ(models["data"][1]["id"], "local-fast");
  EXPECT_EQ(models["data"][0]["meta"]["aliases"], json::array({"local-fast", "claude-*", "gpt-?.?"}));
  EXPECT_EQ(Client().Get("/v1/models/claude-opus-4-1")->status, 200);
}

TEST_F(ServerTest, ModelsHealthTokenizeMetrics) {
  Start();
  auto models = Client().Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "fake-model");
  EXPECT_EQ(Client().Get("/v1/models/fake-model")->status, 200);
  ExpectError(Client().Get("/v1/models/other"), 404, "model", "model_not_found");
  auto health = Client().Get("/health");
  ASSERT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto tok = Post("/tokenize", R"({"content":"ab"})");
  ASSERT_EQ(tok->status, 200);
  EXPECT_EQ(json::parse(tok->body)["tokens"], json({97, 98}));
  auto pieces = Post("/tokenize", R"({"content":"a","with_pieces":true})");
  EXPECT_EQ(json::parse(pieces->body)["tokens"][0]["piece"], "a");
  auto detok = Post("/detokenize", R"({"tokens":[97,98]})");
  ASSERT_EQ(detok->status, 200);
  EXPECT_EQ(json::parse(detok->body)["content"], "ab");
  ExpectError(Post("/detokenize", R"({"tokens":[-1]})"), 400, "tokens");
  ExpectError(Post("/tokenize", R"({"content":5})"), 400, "content");
  // The fake renders a chat as its messages JSON, one token per byte.
  auto tpl = Post("/apply-template", R"({"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(tpl->status, 200);
  const json tj = json::parse(tpl->body);
  const std::string rendered = tj["prompt"];
  EXPECT_NE(rendered.find("\"hi\""), std::string::npos);
  ASSERT_EQ(tj["tokens"].size(), rendered.size());
  EXPECT_EQ(tj["tokens"][0], int(rendered[0]));
  ExpectError(Post("/apply-template", R"({"prompt":"x"})"), 400, "messages");
  ExpectError(Post("/apply-template", R"({"messages":[{"role":"user","content":"bad-template"}]})"),
              400);
  ASSERT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  auto metrics = Client().Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  for (const char* name :
       {"prefixd_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
        "prefixd_http_request_duration_seconds_bucket", "prefixd_prompt_tokens_total",
        "prefixd_cached_tokens_total", "prefixd_generated_tokens_total",
        "prefixd_cache_hits_total{tier=\"ram\"}", "prefixd_cache_misses_by_reason_total",
        "prefixd_cache_bytes{tier=\"ram\"} 1234", "prefixd_time_to_first_token_seconds_count",
        "prefixd_requests_cancelled_total 0", "prefixd_buffer_pool_bytes 3145728",
        "prefixd_buffer_pool_takes_total{outcome=\"fresh\"} 3",
        "prefixd_process_resident_bytes ", "prefixd_process_heap_bytes{state=\"free\"}",
        "prefixd_memory_bytes{owner=\"ram_tier\"} 1234",
        "prefixd_memory_bytes{owner=\"buffer_pool\"} 3145728",
        "prefixd_cache_ram_budget_bytes 4096", "prefixd_buffer_pool_limit_bytes ",
        "prefixd_cache_disk_index_bytes 500", "prefixd_cache_disk_footprint_bytes 7500",
        "prefixd_cache_disk_quota_bytes 8192"}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
  }
}

TEST_F(ServerTest, CacheAdmin) {
  Start();
  auto warm = Post("/v1/cache/warm", R"({"messages":[{"role":"system","content":"sys"}]})");
  ASSERT_EQ(warm->status, 200) << warm->body;
  EXPECT_GT(json::parse(warm->body)["prompt_tokens"].get<int>(), 0);
  auto stats = Client().Get("/v1/cache");
  ASSERT_EQ(stats->status, 200);
  EXPECT_EQ(json::parse(stats->body)["requests"], 1);
  EXPECT_EQ(Post("/v1/cache/clear", "")->status, 200);
  ExpectError(Post("/v1/cache/warm", R"({"prompt":7})"), 400, "prompt");
}

TEST_F(ServerTest, ApiKeysAuthenticateAndSaltPerTenant) {
  std::filesystem::path keys = std::filesystem::temp_directory_path() / "prefixd-test-keys";
  std::ofstream(keys) << "# tenants\nkey-a\n\n  key-b  \n";
  Start(keys.string());
  ExpectError(Post("/v1/chat/completions", kChat), 401, "", "invalid_api_key");
  ExpectError(Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer nope"}}), 401);
  EXPECT_EQ(Client().Get("/health")->status, 200);
  ASSERT_EQ(Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer key-a"}})->status, 200);
  std::string salt_a = backend_.last_salt();
  auto b = Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer key-b"}});
  ASSERT_EQ(b->status, 200);
  std::string salt_b = backend_.last_salt();
  EXPECT_EQ(salt_a.size(), 64u);
  EXPECT_NE(salt_a, salt_b);
  EXPECT_EQ(json::parse(b->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto a2 = Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer key-a"}});
  EXPECT_GT(json::parse(a2->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            0);
  std::filesystem::remove(keys);
}

// Writes `text` to a file in the temp dir and returns its path (removed by the test).
std::string WriteKeyFile(const std::string& name, const std::string& text) {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("prefixd-test-" + name + "-" + std::to_string(::getpid()));
  std::ofstream(path) << text;
  return path.string();
}

TEST_F(ServerTest, XApiKeyHeaderAuthenticatesAsBearerDoes) {
  std::string keys = WriteKeyFile("keys", "key-a\nkey-b\n");
  Start(keys);
  auto missing = Post("/v1/chat/completions", kChat);
  ExpectError(missing, 401, "", "invalid_api_key");
  std::string message = json::parse(missing->body)["error"]["message"];
  EXPECT_NE(message.find("Authorization: Bearer"), std::string::npos) << message;
  EXPECT_NE(message.find("x-api-key"), std::string::npos) << message;
  ExpectError(Post("/v1/chat/completions", kChat, {{"x-api-key", "nope"}}), 401);
  ASSERT_EQ(Post("/v1/chat/completions", kChat, {{"x-api-key", "key-a"}})->status, 200);
  std::string salt_x = backend_.last_salt();
  ASSERT_EQ(Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer key-a"}})->status, 200);
  EXPECT_EQ(backend_.last_salt(), salt_x) << "the same key is the same tenant in either header";
  ASSERT_EQ(Post("/v1/chat/completions", kChat, {{"Authorization", "bearer key-a"}})->status, 200);
  // Both headers: they must name the same key.
  ASSERT_EQ(Post("/v1/chat/completions", kChat,
                 {{"Authorization", "Bearer key-a"}, {"x-api-key", "key-a"}})
                ->status,
            200);
  ExpectError(Post("/v1/chat/completions", kChat,
                   {{"Authorization", "Bearer key-a"}, {"x-api-key", "key-b"}}),
              401, "", "invalid_api_key");
  // A route that reads its tenant (warm) sees the x-api-key tenant too.
  ASSERT_EQ(Post("/v1/cache/warm", R"({"prompt":"abc"})", {{"x-api-key", "key-b"}})->status, 200);
  EXPECT_NE(backend_.last_salt(), salt_x);
  std::filesystem::remove(keys);
}

TEST_F(ServerTest, OnlyAdminKeysClearTheCache) {
  std::string keys = WriteKeyFile("keys", "tenant-a\n");
  std::string admin = WriteKeyFile("admin", "# admins\nadmin-1\n");
  Start(keys, admin);
  auto denied = Post("/v1/cache/clear", "", {{"Authorization", "Bearer tenant-a"}});
  ExpectError(denied, 403, "", "admin_key_required");
  EXPECT_EQ(json::parse(denied->body)["error"]["type"], "permission_error");
  ExpectError(Post("/v1/cache/clear", ""), 401);
  ExpectError(Post("/v1/cache/clear", "", {{"x-api-key", "admin-2"}}), 401);
  auto cleared = Post("/v1/cache/clear", "", {{"x-api-key", "admin-1"}});
  ASSERT_EQ(cleared->status, 200) << cleared->body;
  EXPECT_EQ(json::parse(cleared->body)["cleared"], true);
  // Tenant routes stay open to tenants; an admin key is a tenant of its own.
  ASSERT_EQ(Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer tenant-a"}})->status,
            200);
  std::string salt_tenant = backend_.last_salt();
  ASSERT_EQ(Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer admin-1"}})->status,
            200);
  EXPECT_EQ(backend_.last_salt().size(), 64u);
  EXPECT_NE(backend_.last_salt(), salt_tenant);
  EXPECT_EQ(Client().Get("/v1/cache", httplib::Headers{{"Authorization", "Bearer tenant-a"}})->status, 200);
  // A wrong method on the admin path is still 401/403 before routing, never a 5xx.
  EXPECT_EQ(Client().Get("/v1/cache/clear", httplib::Headers{{"Authorization", "Bearer tenant-a"}})->status, 405);
  std::filesystem::remove(keys);
  std::filesystem::remove(admin);
}

TEST_F(ServerTest, AdminRoutesAreOffWithKeysButNoAdminFile) {
  std::string keys = WriteKeyFile("keys", "tenant-a\n");
  Start(keys);
  auto r = Post("/v1/cache/clear", "", {{"Authorization", "Bearer tenant-a"}});
  ExpectError(r, 403, "", "admin_routes_disabled");
  std::string message = json::parse(r->body)["error"]["message"];
  EXPECT_NE(message.find("--admin-key-file"), std::string::npos) << message;
  std::filesystem::remove(keys);
}

TEST_F(ServerTest, AdminFileAloneTurnsKeysOn) {
  std::string admin = WriteKeyFile("admin", "admin-1\n");
  Start("", admin);
  ExpectError(Post("/v1/chat/completions", kChat), 401);
  EXPECT_EQ(Post("/v1/chat/completions", kChat, {{"x-api-key", "admin-1"}})->status, 200);
  EXPECT_EQ(Post("/v1/cache/clear", "", {{"x-api-key", "admin-1"}})->status, 200);
  std::filesystem::remove(admin);
}

httplib::Headers Bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

// With keys on, GET /v1/cache shows a tenant the counters of its own requests (completions and
// warms) and nothing every tenant moves; an admin sees the engine's, everyone's.
TEST_F(ServerTest, ATenantsCacheCountersMoveWithItsOwnRequestsOnly) {
  std::string keys = WriteKeyFile("keys", "tenant-a\ntenant-b\n");
  std::string admin = WriteKeyFile("admin", "admin-1\n");
  Start(keys, admin);
  auto counters = [&](const std::string& key) {
    auto r = Client().Get("/v1/cache", Bearer(key));
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };
  ASSERT_EQ(Post("/v1/chat/completions", kChat, Bearer("tenant-b"))->status, 200);
  const json b_before = counters("tenant-b");
  EXPECT_EQ(b_before["scope"], "tenant");
  EXPECT_EQ(b_before["requests"], 1);

  int64_t prompt = 0, cached = 0, generated = 0;
  for (int i = 0; i < 2; ++i) {
    auto r = Post("/v1/chat/completions", kChat, Bearer("tenant-a"));
    ASSERT_EQ(r->status, 200) << r->body;
    const json usage = json::parse(r->body)["usage"];
    prompt += usage["prompt_tokens"].get<int64_t>();
    cached += usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    generated += usage["completion_tokens"].get<int64_t>();
  }
  auto warm = Post("/v1/cache/warm", R"({"prompt":"warm me"})", Bearer("tenant-a"));
  ASSERT_EQ(warm->status, 200) << warm->body;
  prompt += json::parse(warm->body)["prompt_tokens"].get<int64_t>();
  generated += 1;  // a warm generates one token

  EXPECT_EQ(counters("tenant-b"), b_before) << "B's view moved with A's requests";
  const json a = counters("tenant-a");
  EXPECT_EQ(a["requests"], 3);
  EXPECT_EQ(a["prompt_tokens"], prompt);
  EXPECT_GT(cached, 0);
  EXPECT_EQ(a["cached_tokens"], cached);
  EXPECT_EQ(a["evaluated_tokens"], prompt - cached);
  EXPECT_EQ(a["generated_tokens"], generated);
  EXPECT_EQ(a["hits"]["ram"], 1);
  EXPECT_EQ(a["misses"], 2);
  for (const char* everyones : {"bytes_by_tier", "evictions_by_tier", "slots_busy",
                                "queue_depth", "draft_prefill_tokens", "draft_restored_tokens"}) {
    EXPECT_FALSE(a.contains(everyones)) << everyones;
  }
  const json all = counters("admin-1");
  EXPECT_EQ(all["requests"], 4) << "the admin sees every tenant's";
  EXPECT_FALSE(all.contains("scope"));
  EXPECT_EQ(all["bytes_by_tier"]["ram"], 1234);
  std::filesystem::remove(keys);
  std::filesystem::remove(admin);
}

// /metrics is every tenant's traffic: with keys on, an admin route (Prometheus sends an admin
// key as Authorization: Bearer); without keys it stays open (ModelsHealthTokenizeMetrics).
TEST_F(ServerTest, MetricsNeedAnAdminKeyWhenKeysAreOn) {
  std::string keys = WriteKeyFile("keys", "tenant-a\n");
  std::string admin = WriteKeyFile("admin", "admin-1\n");
  Start(keys, admin);
  ASSERT_EQ(Post("/v1/chat/completions", kChat, Bearer("tenant-a"))->status, 200);
  ExpectError(Client().Get("/metrics", Bearer("tenant-a")), 403, "", "admin_key_required");
  ExpectError(Client().Get("/metrics"), 401, "", "invalid_api_key");
  auto page = Client().Get("/metrics", Bearer("admin-1"));
  ASSERT_EQ(page->status, 200) << page->body;
  EXPECT_NE(page->body.find("prefixd_prompt_tokens_total"), std::string::npos);
  EXPECT_EQ(Client().Get("/metrics", httplib::Headers{{"x-api-key", "admin-1"}})->status, 200);
  // A tenant still reads the model list, and it names no file.
  auto models = Client().Get("/v1/models", Bearer("tenant-a"));
  ASSERT_EQ(models->status, 200);
  EXPECT_EQ(models->body.find('/'), std::string::npos) << models->body;
  std::filesystem::remove(keys);
  std::filesystem::remove(admin);
}

TEST_F(ServerTest, WithoutKeysEveryRouteIsOpen) {
  Start();
  EXPECT_EQ(Post("/v1/cache/clear", "")->status, 200);
  EXPECT_EQ(Post("/v1/chat/completions", kChat, {{"x-api-key", "anything"}})->status, 200);
  EXPECT_EQ(backend_.last_salt(), "");
}

TEST_F(ServerTest, GenerationBeyondAdmissionGets503BeforeParsing) {
  // 13 pieces: the first request runs about 1.3 s, long enough that the next POST arrives
  // while it holds the place even on a loaded machine.
  backend_.piece_delay = 100ms;
  Start("", "", /*max_admitted=*/1);
  std::thread first([&] { EXPECT_EQ(Post("/v1/chat/completions", kChat)->status, 200); });
  for (int i = 0; i < 1000 && backend_.completions == 0; ++i) std::this_thread::sleep_for(2ms);
  auto busy = Post("/v1/chat/completions", "not even JSON");
  ExpectError(busy, 503, "", "server_overloaded");
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  // Tokenizing is work on the HTTP thread too: admitted alike; reading is not.
  ExpectError(Post("/tokenize", R"({"content":"x"})"), 503, "", "server_overloaded");
  EXPECT_EQ(Client().Get("/v1/models")->status, 200) << "only work is limited";
  first.join();
  EXPECT_EQ(Post("/v1/chat/completions", kChat)->status, 200) << "the place was freed";
  ExpectError(Post("/v1/completions", "{"), 400);
  EXPECT_EQ(Post("/v1/completions", R"({"prompt":"x","max_tokens":1})")->status, 200)
      << "a refused request's place was freed too";
}

// Clients that send their headers and then nothing of their body hold a connection thread,
// never an admission place: with one place, two of them do not turn the next chat away.
TEST_F(ServerTest, ClientsSlowToSendTheirBodyHoldNoPlace) {
  Start("", "", /*max_admitted=*/1);
  std::vector<int> slow;
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\":";
  for (int i = 0; i < 2; ++i) slow.push_back(ConnectAndSend(head));
  std::this_thread::sleep_for(100ms);  // both are in their handlers' body reads by now
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Post("/v1/chat/completions", kChat)->status, 200) << "request " << i;
  }
  for (int fd : slow) close(fd);
}

TEST_F(ServerTest, StreamingClientDisconnectCancels) {
  backend_.reply = std::string(200, 'z');
  backend_.piece_delay = 5ms;
  backend_.n_ctx = 4096;
  Start();
  std::string got = RawExchange(
      HttpPost("/v1/chat/completions",
               R"({"messages":[{"role":"user","content":"x"}],"stream":true})"),
      "\"z\"");
  EXPECT_NE(got.find("200 OK"), std::string::npos);
  for (int i = 0; i < 200 && backend_.cancelled == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(backend_.cancelled, 1);
  backend_.piece_delay = 0ms;
  EXPECT_EQ(Post("/v1/chat/completions", kChat)->status, 200);
  bool counted = false;  // the cancelled request's handler counts it as it unwinds
  for (int i = 0; i < 200 && !counted; ++i) {
    counted = Client().Get("/metrics")->body.find("prefixd_requests_cancelled_total 1") !=
              std::string::npos;
    if (!counted) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(counted);
}

TEST_F(ServerTest, NonStreamingClientDisconnectCancels) {
  backend_.reply = std::string(300, 'z');
  backend_.piece_delay = 5ms;
  backend_.n_ctx = 4096;
  Start();
  RawExchange(HttpPost("/v1/chat/completions", kChat), "");
  for (int i = 0; i < 200 && backend_.cancelled == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(backend_.cancelled, 1);
}

TEST_F(ServerTest, ConcurrentRequests) {
  backend_.piece_delay = 1ms;
  Start();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto r = Post("/v1/chat/completions", kChat);
      if (r && r->status == 200 &&
          json::parse(r->body)["choices"][0]["message"]["content"] == "Hello, world!") {
        ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 8);
}

}  // namespace
}  // namespace prefixd::server
