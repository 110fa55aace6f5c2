// Image parts in a chat request, for a model that reads no images (no projector): each image is
// checked and, by the operator's ImageMode, either stands in the prompt as a short text that
// says what it was ("[image: PNG 1024x768, not shown: this model reads no images]") or makes the
// request a 400. The stand-in depends on the image's bytes only, so the same conversation
// renders to the same tokens on every turn and its cached prefix is reused.
//
// The chat path is where every API's images arrive: a chat completion's `image_url` part as
// the client sent it, a Responses `input_image` and an Anthropic `image` block as the adapters
// translate them (ChatImagePart). An adapter puts the part's name in the client's own request
// under kImagePartPathKey, so an error names what the client sent
// ("messages[1].content[0].content[2].source"), not the translation.
//
// Pure functions; thread-safe; never throw.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/image_bytes.h"
#include "util/status.h"

namespace prefixd::server {

// What an image becomes: for a model that reads none, as serve --images says; for a model
// served with a projector (--mmproj), the image itself.
enum class ImageMode {
  kStandIn,  // "stand-in": a text stand-in in the prompt; the response says so
  kRefuse,   // "refuse": a 400 image_not_supported
  kRead,     // "read": the model reads it (set by --mmproj, not by --images)
};

// "stand-in" / "refuse" -> the mode; anything else is an error listing both.
Result<ImageMode> ParseImageMode(std::string_view name);
const char* ImageModeName(ImageMode mode);

// Each limit, crossed, is a 400 naming the part that crossed it.
struct ImageLimits {
  size_t max_bytes = 20u << 20;            // one image's file, decoded
  uint64_t max_pixels = 50'000'000;        // width x height, from the header, before decoding
  size_t max_images = 64;                  // image parts in one request
};

struct ImageOptions {
  ImageMode mode = ImageMode::kStandIn;
  ImageLimits limits;
};

// The key of a chat image part that names it in the client's request (set by the adapters).
inline constexpr char kImagePartPathKey[] = "prefixd_path";

// The chat image part an adapter sends for an image at `client_path` of its own request: `url`
// is a data URL, or the remote URL the client gave (refused by the chat path, which fetches
// nothing).
template <typename Json>
Json ChatImagePart(std::string url, const std::string& client_path) {
  Json part = Json::object();
  part["type"] = "image_url";
  part["image_url"] = Json::object();
  part["image_url"]["url"] = std::move(url);
  part[kImagePartPathKey] = client_path;
  return part;
}

// A data URL for base64 `data` declared as `media_type` (kept only when it is a plain
// type/subtype; the format is read from the bytes anyway).
std::string ImageDataUrl(const std::string& media_type, const std::string& data);

// The image a chat part's URL holds, checked against `limits`: a base64 data URL
// ("data:<any type>;base64,<data>"), its format and size read from the bytes. A remote URL, a
// data URL that is not base64, bad base64, an unknown or broken file, or a limit crossed is
// an error naming `path`.
// The file's bytes go to *file when it is not null.
std::optional<ApiError> ReadImageUrl(std::string_view url, const std::string& path,
                                     const ImageLimits& limits, ImageInfo* out,
                                     std::string* file = nullptr);

// The text that stands in the prompt for `image`: the same for the same bytes.
std::string ImageStandIn(const ImageInfo& image);

// Replaces every image_url part of the chat `messages` (an array of message objects, as
// request_parse.cpp checked them) with a text part holding its stand-in (kRead: the image
// marker, engine/vision/image_prompt.h, and the file's bytes appended to *files in order), and
// counts them into *n_images; or, in kRefuse mode or when an image fails ReadImageUrl, the
// error to answer for the first image that does. Parts are visited in order, so "too many
// images" names the first one past the limit. `files` may be null unless kRead.
std::optional<ApiError> StandInImageParts(nlohmann::json* messages, const ImageOptions& options,
                                          size_t* n_images,
                                          std::vector<std::string>* files = nullptr);

// The X-Prefixd-Images header of a response whose prompt holds `n_images` images, as `mode`
// put them there ("stand-in; n=2", "read; n=1").
inline constexpr char kImagesHeader[] = "X-Prefixd-Images";
std::string ImagesHeaderValue(ImageMode mode, size_t n_images);

}  // namespace prefixd::server
