#include "server/image_part.h"

#include <algorithm>
#include <cctype>

#include "engine/vision/image_prompt.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;

ApiError ImageError(const std::string& path, const std::string& what) {
  return {ErrorKind::kInvalidRequest, path + ": " + what, path, "invalid_image"};
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), s.begin(), [](char a, char b) {
           return std::tolower(uint8_t(a)) == std::tolower(uint8_t(b));
         });
}

bool EndsWithNoCase(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && StartsWithNoCase(s.substr(s.size() - suffix.size()), suffix);
}

// The start of a value a client sent, for an error that quotes it.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out(s.substr(0, kMax));
  for (char& c : out) {
    if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f) c = '?';
  }
  return "'" + out + (s.size() > kMax ? "...'" : "'");
}

// The base64 text of a data URL, or the error naming `path`.
std::optional<ApiError> DataUrlPayload(std::string_view url, const std::string& path,
                                       std::string_view* out) {
  if (StartsWithNoCase(url, "http://") || StartsWithNoCase(url, "https://")) {
    return ImageError(path, "a remote image URL: this server fetches nothing; send the image's "
                            "bytes inline, base64 (data:image/png;base64,...)");
  }
  if (!StartsWithNoCase(url, "data:")) {
    return ImageError(path, "must be a data URL (data:image/png;base64,...), got " + Quote(url));
  }
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return ImageError(path, "a data URL without a ','");
  if (!EndsWithNoCase(url.substr(0, comma), ";base64")) {
    return ImageError(path, "a data URL that is not base64 (no ';base64' before the ','): " +
                                Quote(url));
  }
  *out = url.substr(comma + 1);
  return std::nullopt;
}

std::optional<ApiError> CheckPixels(const ImageInfo& image, const std::string& path,
                                    const ImageLimits& limits) {
  const uint64_t pixels = uint64_t(image.width) * image.height;
  if (pixels <= limits.max_pixels) return std::nullopt;
  return ImageError(path, std::string("the ") + ImageFormatName(image.format) + " declares " +
                              std::to_string(image.width) + "x" + std::to_string(image.height) +
                              " = " + std::to_string(pixels) + " pixels; at most " +
                              std::to_string(limits.max_pixels) +
                              " (refused from its header, not decoded)");
}

// The URL of a chat image part: image_url.url, or image_url as a string.
std::optional<ApiError> PartUrl(const json& part, const std::string& path, std::string_view* out) {
  const auto it = part.find("image_url");
  const json* url = nullptr;
  if (it != part.end() && it->is_string()) url = &*it;
  if (it != part.end() && it->is_object() && it->contains("url")) url = &(*it)["url"];
  if (url == nullptr || !url->is_string()) {
    return ImageError(path, "an image_url part needs {\"url\": \"data:image/png;base64,...\"}");
  }
  *out = url->get_ref<const std::string&>();
  return std::nullopt;
}

// The name of the image part content[j] of messages[i] in the client's request.
std::string PartPath(const json& part, size_t i, size_t j) {
  const auto it = part.find(kImagePartPathKey);
  if (it != part.end() && it->is_string()) return it->get<std::string>();
  return "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "].image_url";
}

ApiError Refused(const std::string& path) {
  return {ErrorKind::kInvalidRequest,
          path + ": this model reads no images, and this server refuses them (serve --images "
                 "refuse; --images stand-in would put a text stand-in in their place)",
          path, "image_not_supported"};
}

// One image part: its stand-in text part (kRead: the marker, the file appended to *files), or
// the error.
std::optional<ApiError> StandIn(json* part, const std::string& path, const ImageOptions& options,
                                std::vector<std::string>* files) {
  if (options.mode == ImageMode::kRefuse) return Refused(path);
  std::string_view url;
  if (auto e = PartUrl(*part, path, &url)) return e;
  ImageInfo image;
  if (options.mode == ImageMode::kRead) {
    std::string bytes;
    if (auto e = ReadImageUrl(url, path, options.limits, &image, &bytes)) return e;
    files->push_back(std::move(bytes));
    *part = json{{"type", "text"}, {"text", engine::kImageMarker}};
    return std::nullopt;
  }
  if (auto e = ReadImageUrl(url, path, options.limits, &image)) return e;
  *part = json{{"type", "text"}, {"text", ImageStandIn(image)}};
  return std::nullopt;
}

bool IsImagePart(const json& part) {
  if (!part.is_object()) return false;
  const auto type = part.find("type");
  return type != part.end() && *type == "image_url";
}

}  // namespace

Result<ImageMode> ParseImageMode(std::string_view name) {
  if (name == "stand-in") return ImageMode::kStandIn;
  if (name == "refuse") return ImageMode::kRefuse;
  return Status::InvalidArgument("--images: stand-in (a text stand-in in the prompt) or refuse "
                                 "(a 400), got '" + std::string(name) + "'");
}

const char* ImageModeName(ImageMode mode) {
  switch (mode) {
    case ImageMode::kRefuse: return "refuse";
    case ImageMode::kRead: return "read";
    case ImageMode::kStandIn: return "stand-in";
  }
  return "stand-in";
}

std::string ImageDataUrl(const std::string& media_type, const std::string& data) {
  const bool plain = std::all_of(media_type.begin(), media_type.end(), [](char c) {
    return std::isalnum(uint8_t(c)) || c == '/' || c == '.' || c == '+' || c == '-';
  });
  const std::string type = plain && !media_type.empty() ? media_type : "application/octet-stream";
  std::string url;
  url.reserve(5 + type.size() + 8 + data.size());
  url.append("data:").append(type).append(";base64,").append(data);
  return url;
}

std::optional<ApiError> ReadImageUrl(std::string_view url, const std::string& path,
                                     const ImageLimits& limits, ImageInfo* out,
                                     std::string* file) {
  std::string_view base64;
  if (auto e = DataUrlPayload(url, path, &base64)) return e;
  if (const size_t n = Base64DecodedSize(base64); n > limits.max_bytes) {
    return ImageError(path, "the image is " + std::to_string(n) + " bytes; at most " +
                                std::to_string(limits.max_bytes));
  }
  Result<std::string> bytes = DecodeBase64(base64);
  if (!bytes.ok()) return ImageError(path, bytes.status().message());
  Result<ImageInfo> image = ReadImageHeader(*bytes);
  if (!image.ok()) return ImageError(path, image.status().message());
  if (auto e = CheckPixels(*image, path, limits)) return e;
  *out = *image;
  if (file != nullptr) *file = std::move(*bytes);
  return std::nullopt;
}

std::string ImageStandIn(const ImageInfo& image) {
  return std::string("[image: ") + ImageFormatName(image.format) + " " +
         std::to_string(image.width) + "x" + std::to_string(image.height) +
         ", not shown: this model reads no images]";
}

std::optional<ApiError> StandInImageParts(json* messages, const ImageOptions& options,
                                          size_t* n_images, std::vector<std::string>* files) {
  for (size_t i = 0; i < messages->size(); ++i) {
    json& msg = (*messages)[i];
    const auto content = msg.find("content");
    if (content == msg.end() || !content->is_array()) continue;
    for (size_t j = 0; j < content->size(); ++j) {
      json& part = (*content)[j];
      if (!IsImagePart(part)) continue;
      const std::string path = PartPath(part, i, j);
      if (++*n_images > options.limits.max_images) {
        return ImageError(path, "the request has more than " +
                                    std::to_string(options.limits.max_images) + " images");
      }
      if (auto e = StandIn(&part, path, options, files)) return e;
    }
  }
  return std::nullopt;
}

std::string ImagesHeaderValue(ImageMode mode, size_t n_images) {
  return std::string(ImageModeName(mode)) + "; n=" + std::to_string(n_images);
}

}  // namespace prefixd::server
