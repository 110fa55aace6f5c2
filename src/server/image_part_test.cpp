#include "server/image_part.h"

#include <gtest/gtest.h>

#include "server/request_parse.h"
#include "server/test_images.h"

namespace prefixd::server {
namespace {

namespace ti = test_images;
using json = nlohmann::json;

const std::string kPath = "messages[2].content[1].image_url";

ImageInfo ReadOk(const std::string& url, const ImageLimits& limits = {}) {
  ImageInfo info;
  auto e = ReadImageUrl(url, kPath, limits, &info);
  EXPECT_FALSE(e) << e->message;
  return info;
}

// The error for `url`: it names the part, as param and at the start of the message.
ApiError ReadError(const std::string& url, const ImageLimits& limits = {}) {
  ImageInfo info;
  auto e = ReadImageUrl(url, kPath, limits, &info);
  EXPECT_TRUE(e) << "read " << url.substr(0, 60);
  if (!e) return {};
  EXPECT_EQ(e->kind, ErrorKind::kInvalidRequest);
  EXPECT_EQ(e->param, kPath);
  EXPECT_EQ(e->message.rfind(kPath + ": ", 0), 0u) << e->message;
  return *e;
}

bool Says(const ApiError& e, const std::string& what) {
  return e.message.find(what) != std::string::npos;
}

TEST(ImagePart, ReadsADataUrlOfEachFormat) {
  ImageInfo png = ReadOk(std::string("data:image/png;base64,") + ti::kPng1x1);
  EXPECT_EQ(png.format, ImageFormat::kPng);
  EXPECT_EQ(png.width, 1u);
  EXPECT_EQ(ReadOk(ti::DataUrl(ti::Jpeg(640, 480), "image/jpeg")).format, ImageFormat::kJpeg);
  EXPECT_EQ(ReadOk(ti::DataUrl(ti::Gif(2, 2), "image/gif")).format, ImageFormat::kGif);
  EXPECT_EQ(ReadOk(ti::DataUrl(ti::WebpExtended(9, 9), "image/webp")).format, ImageFormat::kWebp);
  EXPECT_EQ(ReadOk("DATA:image/png;charset=x;BASE64," + ti::Base64(ti::Png(3, 3))).width, 3u);
}

TEST(ImagePart, ReadsTheFormatFromTheBytesNotTheDeclaredType) {
  ImageInfo i = ReadOk(ti::DataUrl(ti::Png(1024, 768), "image/jpeg"));
  EXPECT_EQ(i.format, ImageFormat::kPng);
  EXPECT_EQ(ImageStandIn(i), "[image: PNG 1024x768, not shown: this model reads no images]");
  EXPECT_EQ(ReadOk(ti::DataUrl(ti::Jpeg(5, 6), "text/plain")).format, ImageFormat::kJpeg);
  EXPECT_EQ(ReadOk(ti::DataUrl(ti::Gif(5, 6), "")).format, ImageFormat::kGif);
}

TEST(ImagePart, RefusesWhatIsNotAnInlineImage) {
  EXPECT_TRUE(Says(ReadError("https://example.com/cat.png"), "fetches nothing"));
  EXPECT_TRUE(Says(ReadError("HTTP://example.com/cat.png"), "a remote image URL"));
  EXPECT_TRUE(Says(ReadError("file:///etc/passwd"), "must be a data URL"));
  EXPECT_TRUE(Says(ReadError(ti::kPng1x1), "must be a data URL"));  // base64 without data:
  EXPECT_TRUE(Says(ReadError("data:image/png;base64"), "without a ','"));
  EXPECT_TRUE(Says(ReadError("data:image/png,%89PNG"), "not base64"));
}

TEST(ImagePart, RefusesBrokenImagesSayingWhatIsWrong) {
  EXPECT_TRUE(Says(ReadError("data:image/png;base64,iVBOR w0KGgo="), "byte 5 is a space"));
  EXPECT_TRUE(Says(ReadError("data:image/png;base64,"), "not base64: it is empty"));
  const std::string png = ti::Png(3, 2);
  EXPECT_TRUE(Says(ReadError(ti::DataUrl(png.substr(0, 40))), "truncated PNG"));
  EXPECT_TRUE(Says(ReadError(ti::DataUrl("%PDF-1.7 ...")), "not a PNG, JPEG, GIF or WebP"));
}

TEST(ImagePart, RefusesABombFromItsHeaderAndABigFileBeforeDecoding) {
  ApiError bomb = ReadError(ti::DataUrl(ti::Png(100000, 100000)));
  EXPECT_TRUE(Says(bomb, "100000x100000 = 10000000000 pixels; at most 50000000")) << bomb.message;
  EXPECT_TRUE(Says(bomb, "not decoded"));
  EXPECT_TRUE(Says(ReadError(ti::DataUrl(ti::WebpExtended(8000, 8000))), "pixels"));
  EXPECT_EQ(ReadOk(ti::DataUrl(ti::Png(10000, 5000))).width, 10000u);  // exactly the limit

  ImageLimits small;
  small.max_bytes = 100;
  ApiError big = ReadError(ti::DataUrl(std::string(101, 'x')), small);
  EXPECT_TRUE(Says(big, "the image is 101 bytes; at most 100")) << big.message;
  // The size is known from the text's length: refused before the (bad) base64 is looked at.
  EXPECT_TRUE(Says(ReadError("data:image/png;base64," + std::string(200, '!'), small),
                   "bytes; at most 100"));
  EXPECT_EQ(ReadOk(ti::DataUrl(ti::Png(2, 2)), small).width, 2u);
}

TEST(ImagePart, TheStandInDependsOnTheImageOnly) {
  const ImageInfo a = ReadOk(ti::DataUrl(ti::WebpLossy(64, 32), "image/webp"));
  const ImageInfo b = ReadOk(ti::DataUrl(ti::WebpLossy(64, 32), "image/png"));
  EXPECT_EQ(ImageStandIn(a), ImageStandIn(b));
  EXPECT_EQ(ImageStandIn(a), "[image: WebP 64x32, not shown: this model reads no images]");
}

TEST(ImagePart, ParsesTheModeByName) {
  EXPECT_EQ(*ParseImageMode("stand-in"), ImageMode::kStandIn);
  EXPECT_EQ(*ParseImageMode("refuse"), ImageMode::kRefuse);
  Result<ImageMode> bad = ParseImageMode("off");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stand-in"), std::string::npos);
  EXPECT_STREQ(ImageModeName(ImageMode::kRefuse), "refuse");
  EXPECT_STREQ(ImageModeName(ImageOptions{}.mode), "stand-in");  // the default
}

TEST(ImagePart, DataUrlKeepsOnlyAPlainMediaType) {
  EXPECT_EQ(ImageDataUrl("image/png", "AAAA"), "data:image/png;base64,AAAA");
  EXPECT_EQ(ImageDataUrl("image/png;base64,x", "AAAA"), "data:application/octet-stream;base64,AAAA");
  EXPECT_EQ(ImageDataUrl("", "AAAA"), "data:application/octet-stream;base64,AAAA");
}

json ImageUrlPart(const std::string& url) {
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

TEST(ImagePart, StandsInForEveryImagePartInOrder) {
  json messages = json::array();
  messages.push_back({{"role", "user"},
                      {"content", json::array({json{{"type", "text"}, {"text", "look"}},
                                               ImageUrlPart(ti::DataUrl(ti::Png(4, 3))),
                                               ImageUrlPart(ti::DataUrl(ti::Gif(2, 1)))})}});
  json tool_part = ChatImagePart<json>(ti::DataUrl(ti::Jpeg(8, 6)), "input[3].output[0].image_url");
  messages.push_back({{"role", "tool"}, {"content", json::array({tool_part})}});
  size_t n = 0;
  ASSERT_FALSE(StandInImageParts(&messages, {}, &n));
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(messages[0]["content"][0]["text"], "look");
  EXPECT_EQ(messages[0]["content"][1],
            (json{{"type", "text"},
                  {"text", "[image: PNG 4x3, not shown: this model reads no images]"}}));
  EXPECT_EQ(messages[0]["content"][2]["text"],
            "[image: GIF 2x1, not shown: this model reads no images]");
  EXPECT_EQ(messages[1]["content"][0]["text"],
            "[image: JPEG 8x6, not shown: this model reads no images]");
  EXPECT_EQ(ImagesHeaderValue(ImageMode::kStandIn, n), "stand-in; n=3");
  EXPECT_EQ(ImagesHeaderValue(ImageMode::kRead, 1), "read; n=1");
}

TEST(ImagePart, ErrorsNameThePartInTheClientsRequest) {
  json messages = json::array();
  json bad = ChatImagePart<json>("data:image/png;base64,@@@@", "messages[1].content[0].source");
  messages.push_back({{"role", "user"}, {"content", json::array({bad})}});
  size_t n = 0;
  auto e = StandInImageParts(&messages, {}, &n);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[1].content[0].source");
  EXPECT_EQ(e->message, "messages[1].content[0].source: not base64: byte 0 is '@'");
  EXPECT_EQ(e->code, "invalid_image");

  json chat = json::array({json{{"role", "user"},
                                {"content", json::array({ImageUrlPart("https://x/y.png")})}}});
  e = StandInImageParts(&chat, {}, &n);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].content[0].image_url");

  json no_url = json::array({json{{"role", "user"},
                                  {"content", json::array({json{{"type", "image_url"}}})}}});
  e = StandInImageParts(&no_url, {}, &n);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("needs {\"url\""), std::string::npos);
}

TEST(ImagePart, CountsImagesAcrossTheRequestAndNamesTheFirstPastTheLimit) {
  ImageOptions options;
  options.limits.max_images = 2;
  json messages = json::array();
  for (int i = 0; i < 2; ++i) {
    messages.push_back({{"role", "user"},
                        {"content", json::array({ImageUrlPart(ti::DataUrl(ti::Png(1, 1))),
                                                 ImageUrlPart(ti::DataUrl(ti::Png(1, 1)))})}});
  }
  size_t n = 0;
  auto e = StandInImageParts(&messages, options, &n);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[1].content[0].image_url");
  EXPECT_NE(e->message.find("more than 2 images"), std::string::npos);
}

TEST(ImagePart, RefuseModeRefusesTheFirstImageNamingTheFlag) {
  ImageOptions options;
  options.mode = ImageMode::kRefuse;
  json messages = json::array({json{{"role", "user"},
                                    {"content", json::array({ImageUrlPart(ti::DataUrl(ti::Png(1, 1)))})}}});
  size_t n = 0;
  auto e = StandInImageParts(&messages, options, &n);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "image_not_supported");
  EXPECT_EQ(HttpStatusOf(e->kind), 400);
  EXPECT_NE(e->message.find("this model reads no images"), std::string::npos);
  EXPECT_NE(e->message.find("--images refuse"), std::string::npos);
}

// The chat path: image parts in user and tool messages become stand-ins in messages_json.
ChatRequest ParseChat(const json& messages, const ImageOptions& images = {},
                      std::optional<ApiError>* error = nullptr) {
  ParseLimits limits;
  limits.images = images;
  ChatRequest out;
  auto e = ParseChatRequest(json{{"messages", messages}}.dump(), limits, &out);
  if (error) *error = e;
  else EXPECT_FALSE(e) << e->message;
  return out;
}

TEST(ImagePart, ChatRequestsCarryStandInsAndTheirCount) {
  json messages = json::array(
      {json{{"role", "system"}, {"content", "sys"}},
       json{{"role", "user"},
            {"content", json::array({json{{"type", "text"}, {"text", "what is this?"}},
                                     ImageUrlPart(ti::DataUrl(ti::Png(1024, 768), "image/jpeg"))})}}});
  ChatRequest r = ParseChat(messages);
  EXPECT_EQ(r.n_images, 1u);
  EXPECT_NE(r.messages_json.find("[image: PNG 1024x768, not shown: this model reads no images]"),
            std::string::npos);
  EXPECT_EQ(r.messages_json.find("base64"), std::string::npos);
  // The same conversation, one turn later: its messages render to the same text up to the end.
  json next = messages;
  next.push_back({{"role", "assistant"}, {"content", "A picture."}});
  next.push_back({{"role", "user"}, {"content", "and now?"}});
  ChatRequest r2 = ParseChat(next);
  const std::string first = r.messages_json.substr(0, r.messages_json.size() - 2);
  EXPECT_EQ(r2.messages_json.rfind(first, 0), 0u);

  ChatRequest text_only = ParseChat(json::array({json{{"role", "user"}, {"content", "hi"}}}));
  EXPECT_EQ(text_only.n_images, 0u);

  std::optional<ApiError> e;
  ParseChat(json::array({json{{"role", "assistant"},
                              {"content", json::array({ImageUrlPart(ti::DataUrl(ti::Png(1, 1)))})}}}),
            {}, &e);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("image parts belong in user and tool messages"), std::string::npos);
}

}  // namespace
}  // namespace prefixd::server
