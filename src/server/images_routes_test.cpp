// Images through each API over a FakeBackend, on the real chat path: a chat completion's
// image_url parts, a Responses input_image (in a message and in a function_call_output), an
// Anthropic image block (in a user turn and inside a tool_result). For a model that reads no
// images each becomes its text stand-in, the response says so, and the next turn reuses the
// prompt; a broken image is a 400 naming the part as the client's API names it; with
// ImageMode::kRefuse every image is a 400.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/fake_backend.h"
#include "server/request_log.h"
#include "server/server.h"
#include "server/test_images.h"

namespace prefixd::server {
namespace {

namespace ti = test_images;
using json = nlohmann::json;

const std::string kStandIn = "not shown: this model reads no images]";

// A FakeBackend that keeps the messages of the last chat it rendered.
class RecordingBackend : public FakeBackend {
 public:
  using FakeBackend::PrepareChat;
  Result<Prompt> PrepareChat(const std::string& messages_json,
                             const engine::ChatRenderOptions& options) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_messages_ = messages_json;
    }
    return FakeBackend::PrepareChat(messages_json, options);
  }
  std::string last_messages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_messages_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::string last_messages_;
};

class ImageRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetRequestLogEnabled(false);
    backend_.n_ctx = 1 << 16;
    dir_ = std::filesystem::temp_directory_path() /
           ("prefixd-image-routes-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto auth = TenantAuth::Create(Env::Default(), "", dir_.string());
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(*auth);
  }
  void Start(ImageMode mode = ImageMode::kStandIn) {
    ServerOptions opts;
    opts.port = 0;
    opts.images.mode = mode;
    opts.images.limits.max_images = 4;
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

  httplib::Result Post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c.Post(path.c_str(), body.dump(), "application/json");
  }

  // Posts `body`, expects a 400 whose error names `param` (also at the start of its message).
  json ExpectRefused(const std::string& path, const json& body, const std::string& param) {
    auto r = Post(path, body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 400) << r->body;
    json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["message"].get<std::string>().rfind(param + ": ", 0), 0u) << e.dump();
    if (e.contains("param")) EXPECT_EQ(e["param"], param) << e.dump();
    return e;
  }

  RecordingBackend backend_;
  std::unique_ptr<TenantAuth> auth_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::filesystem::path dir_;
  int port_ = 0;
};

json ChatImage(const std::string& url) {
  return {{"type", "image_url"}, {"image_url", {{"url", url}, {"detail", "auto"}}}};
}

json AnthropicImage(const std::string& data, const std::string& media_type = "image/png") {
  return {{"type", "image"},
          {"source", {{"type", "base64"}, {"media_type", media_type}, {"data", data}}}};
}

TEST_F(ImageRoutesTest, ChatCompletionStandsInAndTheNextTurnReusesThePrompt) {
  Start();
  json messages = json::array(
      {json{{"role", "system"}, {"content", "You describe pictures."}},
       json{{"role", "user"},
            {"content", json::array({json{{"type", "text"}, {"text", "What is this?"}},
                                     ChatImage(ti::DataUrl(ti::Png(1024, 768))),
                                     ChatImage(ti::DataUrl(ti::Jpeg(64, 48), "image/png"))})}}});
  auto r = Post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 4}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Prefixd-Images"), "stand-in; n=2");
  const std::string rendered = backend_.last_messages();
  EXPECT_NE(rendered.find("[image: PNG 1024x768, " + kStandIn), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("[image: JPEG 64x48, " + kStandIn), std::string::npos) << rendered;
  const int64_t prev_prompt = json::parse(r->body)["usage"]["prompt_tokens"].get<int64_t>();

  messages.push_back({{"role", "assistant"}, {"content", "Hell"}});
  messages.push_back({{"role", "user"}, {"content", "And the second one?"}});
  r = Post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 4}, {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Prefixd-Images"), "stand-in; n=2");
  const size_t usage_at = r->body.rfind("\"cached_tokens\":");
  ASSERT_NE(usage_at, std::string::npos) << r->body;
  const int64_t cached = std::stoll(r->body.substr(usage_at + 16));
  EXPECT_GE(double(cached), 0.99 * double(prev_prompt)) << cached << " of " << prev_prompt;

  // A text-only request says nothing of images.
  r = Post("/v1/chat/completions", {{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_FALSE(r->has_header("X-Prefixd-Images"));
}

TEST_F(ImageRoutesTest, ResponsesInputImageInAMessageAndInAFunctionOutput) {
  Start();
  json input = json::array(
      {json{{"role", "user"},
            {"content", json::array({json{{"type", "input_text"}, {"text", "Read the chart."}},
                                     json{{"type", "input_image"}, {"detail", "high"},
                                          {"image_url", ti::DataUrl(ti::Gif(320, 200), "image/gif")}}})}},
       json{{"type", "function_call"}, {"call_id", "c1"}, {"name", "screenshot"}, {"arguments", "{}"}},
       json{{"type", "function_call_output"},
            {"call_id", "c1"},
            {"output", json::array({json{{"type", "input_text"}, {"text", "the screen:"}},
                                    json{{"type", "input_image"},
                                         {"image_url", ti::DataUrl(ti::WebpLossy(800, 600), "image/webp")}}})}}});
  auto r = Post("/v1/responses", {{"input", input}, {"max_output_tokens", 4}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Prefixd-Images"), "stand-in; n=2");
  const std::string rendered = backend_.last_messages();
  EXPECT_NE(rendered.find("[image: GIF 320x200, " + kStandIn), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("[image: WebP 800x600, " + kStandIn), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("the screen:"), std::string::npos);

  // Errors name the Responses part.
  json broken = input;
  broken[2]["output"][1]["image_url"] = "data:image/webp;base64,UklGR=";
  ExpectRefused("/v1/responses", {{"input", broken}}, "input[2].output[1].image_url");
  broken = input;
  broken[0]["content"][1]["image_url"] = "https://example.com/chart.gif";
  json e = ExpectRefused("/v1/responses", {{"input", broken}}, "input[0].content[1].image_url");
  EXPECT_NE(e["message"].get<std::string>().find("fetches nothing"), std::string::npos);
  broken = input;
  broken[0]["content"][1] = {{"type", "input_image"}, {"file_id", "file-1"}};
  ExpectRefused("/v1/responses", {{"input", broken}}, "input[0].content[1].file_id");
}

TEST_F(ImageRoutesTest, AnthropicImageInAUserTurnAndInsideAToolResult) {
  Start();
  json messages = json::array(
      {json{{"role", "user"},
            {"content", json::array({AnthropicImage(ti::kPng1x1),
                                     json{{"type", "text"}, {"text", "Read this file too."}}})}},
       json{{"role", "assistant"},
            {"content", json::array({json{{"type", "tool_use"}, {"id", "t1"}, {"name", "Read"},
                                          {"input", {{"file_path", "/tmp/shot.png"}}}}})}},
       json{{"role", "user"},
            {"content", json::array({json{{"type", "tool_result"}, {"tool_use_id", "t1"},
                                          {"content", json::array({
                                              json{{"type", "text"}, {"text", "The image:"}},
                                              AnthropicImage(ti::Base64(ti::Png(1920, 1080)), "image/jpeg")})}}})}}});
  json body = {{"max_tokens", 8}, {"messages", messages}};
  auto r = Post("/v1/messages", body);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Prefixd-Images"), "stand-in; n=2");
  const std::string rendered = backend_.last_messages();
  EXPECT_NE(rendered.find("[image: PNG 1x1, " + kStandIn), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("[image: PNG 1920x1080, " + kStandIn), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("\"tool_call_id\":\"t1\""), std::string::npos) << rendered;

  // count_tokens takes the same images.
  auto count = Post("/v1/messages/count_tokens", {{"messages", messages}});
  ASSERT_EQ(count->status, 200) << count->body;
  EXPECT_GT(json::parse(count->body)["input_tokens"].get<int>(), 0);

  // Errors name the Anthropic block's source.
  json broken = messages;
  broken[2]["content"][0]["content"][1]["source"]["data"] = "iVBORw0KGgo";  // cut, no padding
  ExpectRefused("/v1/messages", {{"max_tokens", 8}, {"messages", broken}},
                "messages[2].content[0].content[1].source");
  broken = messages;
  broken[0]["content"][0]["source"] = {{"type", "url"}, {"url", "https://example.com/a.png"}};
  ExpectRefused("/v1/messages", {{"max_tokens", 8}, {"messages", broken}},
                "messages[0].content[0].source");
  broken = messages;
  broken[0]["content"][0]["source"] = {{"type", "file"}, {"file_id", "f1"}};
  ExpectRefused("/v1/messages", {{"max_tokens", 8}, {"messages", broken}},
                "messages[0].content[0].source.type");
}

TEST_F(ImageRoutesTest, HostileImagesAreRefusedNamingThePartAndTheServerServesOn) {
  Start();
  auto chat = [](json part) {
    return json{{"max_tokens", 4},
                {"messages", json::array({json{{"role", "user"},
                                               {"content", json::array({json{{"type", "text"}, {"text", "hi"}},
                                                                        part})}}})}};
  };
  const std::string path = "messages[0].content[1].image_url";
  const std::string png = ti::Png(3, 2);
  EXPECT_NE(ExpectRefused("/v1/chat/completions", chat(ChatImage("data:image/png;base64,iVBO*w0K")), path)
                ["message"].get<std::string>().find("not base64"),
            std::string::npos);
  EXPECT_NE(ExpectRefused("/v1/chat/completions", chat(ChatImage(ti::DataUrl(png.substr(0, 45)))), path)
                ["message"].get<std::string>().find("truncated PNG"),
            std::string::npos);
  EXPECT_NE(ExpectRefused("/v1/chat/completions", chat(ChatImage(ti::DataUrl(ti::Png(100000, 100000)))), path)
                ["message"].get<std::string>().find("pixels"),
            std::string::npos);
  EXPECT_NE(ExpectRefused("/v1/chat/completions", chat(ChatImage(ti::DataUrl("BM6\x01\x02\x03"))), path)
                ["message"].get<std::string>().find("not a PNG, JPEG, GIF or WebP"),
            std::string::npos);
  ExpectRefused("/v1/chat/completions", chat(ChatImage("http://10.0.0.1/a.png")), path);
  json many = json::array();
  for (int i = 0; i < 5; ++i) many.push_back(ChatImage(ti::DataUrl(ti::Png(1, 1))));
  ExpectRefused("/v1/chat/completions",
                {{"messages", json::array({json{{"role", "user"}, {"content", many}}})}},
                "messages[0].content[4].image_url");
  auto r = Post("/v1/chat/completions", chat(ChatImage(ti::DataUrl(png))));
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Prefixd-Images"), "stand-in; n=1");
}

TEST_F(ImageRoutesTest, RefuseModeAnswers400ToEveryApi) {
  Start(ImageMode::kRefuse);
  const std::string url = ti::DataUrl(ti::Png(2, 2));
  auto r = Post("/v1/chat/completions",
                {{"messages", json::array({json{{"role", "user"}, {"content", json::array({ChatImage(url)})}}})}});
  ASSERT_EQ(r->status, 400) << r->body;
  json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "image_not_supported");
  EXPECT_NE(e["message"].get<std::string>().find("--images"), std::string::npos);

  r = Post("/v1/responses",
           {{"input", json::array({json{{"role", "user"},
                                        {"content", json::array({json{{"type", "input_image"}, {"image_url", url}}})}}})}});
  EXPECT_EQ(r->status, 400) << r->body;
  r = Post("/v1/messages",
           {{"max_tokens", 4},
            {"messages", json::array({json{{"role", "user"},
                                           {"content", json::array({AnthropicImage(ti::kPng1x1)})}}})}});
  ASSERT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("reads no images"), std::string::npos) << r->body;
  // Text is served as ever.
  r = Post("/v1/chat/completions", {{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}});
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace prefixd::server
