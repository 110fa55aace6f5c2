#include "server/image_bytes.h"

#include <openssl/evp.h>

#include <climits>
#include <cstdio>

namespace prefixd::server {
namespace {

// ---- Reading integers, bounds checked by the callers ----

uint32_t Be16(std::string_view b, size_t at) {
  return uint32_t(uint8_t(b[at])) << 8 | uint8_t(b[at + 1]);
}
uint32_t Be32(std::string_view b, size_t at) { return Be16(b, at) << 16 | Be16(b, at + 2); }
uint32_t Le16(std::string_view b, size_t at) {
  return uint32_t(uint8_t(b[at])) | uint32_t(uint8_t(b[at + 1])) << 8;
}
uint32_t Le24(std::string_view b, size_t at) {
  return Le16(b, at) | uint32_t(uint8_t(b[at + 2])) << 16;
}
uint32_t Le32(std::string_view b, size_t at) { return Le16(b, at) | Le16(b, at + 2) << 16; }

std::string Hex(uint8_t byte) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", byte);
  return buf;
}

// A byte as an error names it: the character when printable, else its value.
std::string ByteName(char c) {
  const auto u = uint8_t(c);
  if (u > 0x20 && u < 0x7f) return std::string("'") + c + "'";
  if (c == ' ') return "a space";
  if (c == '\n' || c == '\r' || c == '\t') return "whitespace (" + Hex(u) + ")";
  return Hex(u);
}

// Up to 8 leading bytes in hex, for an error about a file of no known format.
std::string LeadingBytes(std::string_view b) {
  std::string out;
  for (size_t i = 0; i < b.size() && i < 8; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", uint8_t(b[i]));
    out += (i ? " " : "") + std::string(buf);
  }
  return out;
}

// A four-character code (PNG chunk type, RIFF chunk id) as an error names it.
std::string FourCc(std::string_view b, size_t at) {
  std::string s(b.substr(at, 4));
  for (char c : s) {
    if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f) return LeadingBytes(s);
  }
  return "'" + s + "'";
}

Status Truncated(const char* format, const std::string& where, size_t n_bytes) {
  return Status::InvalidArgument(std::string("truncated ") + format + ": the file ends " + where +
                                 " (" + std::to_string(n_bytes) + " bytes)");
}

Result<ImageInfo> Sized(ImageFormat format, uint32_t width, uint32_t height, size_t n_bytes) {
  if (width == 0 || height == 0) {
    return Status::InvalidArgument(std::string(ImageFormatName(format)) + " header declares a " +
                                   std::to_string(width) + "x" + std::to_string(height) +
                                   " image");
  }
  return ImageInfo{format, width, height, n_bytes};
}

bool IsBase64Char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '+' || c == '/';
}

// ---- PNG ----

// Walks the chunks after IHDR to IEND, by their lengths: a file cut anywhere ends inside one.
Status WalkPngChunks(std::string_view b) {
  size_t at = 8;
  bool saw_data = false;
  for (;;) {
    if (b.size() - at < 8) return Truncated("PNG", "between its chunks, before IEND", b.size());
    const uint32_t length = Be32(b, at);
    if (length > 0x7fffffffu) {
      return Status::InvalidArgument("PNG chunk " + FourCc(b, at + 4) + " at byte " +
                                     std::to_string(at) + " declares " + std::to_string(length) +
                                     " bytes (at most 2^31-1)");
    }
    const std::string_view type = b.substr(at + 4, 4);
    if (uint64_t(b.size() - at) < 12 + uint64_t(length)) {
      return Truncated("PNG", "inside its " + FourCc(b, at + 4) + " chunk", b.size());
    }
    if (type == "IEND") break;
    saw_data = saw_data || type == "IDAT";
    at += 12 + length;
  }
  if (!saw_data) return Status::InvalidArgument("PNG has no image data (no IDAT chunk)");
  return Status::OK();
}

Result<ImageInfo> ReadPng(std::string_view b) {
  static constexpr std::string_view kSignature("\x89PNG\r\n\x1a\n", 8);
  if (b.size() < 8) return Truncated("PNG", "inside its signature", b.size());
  if (b.substr(0, 8) != kSignature) {
    return Status::InvalidArgument("not a PNG: its signature is broken (" + LeadingBytes(b) + ")");
  }
  if (b.size() < 8 + 8 + 13) return Truncated("PNG", "inside its IHDR header", b.size());
  if (b.substr(12, 4) != "IHDR" || Be32(b, 8) != 13) {
    return Status::InvalidArgument("PNG's first chunk is " + FourCc(b, 12) +
                                   " of " + std::to_string(Be32(b, 8)) +
                                   " bytes, not IHDR of 13");
  }
  const uint32_t width = Be32(b, 16), height = Be32(b, 20);
  if (width > 0x7fffffffu || height > 0x7fffffffu) {
    return Status::InvalidArgument("PNG header declares a width or height over 2^31-1");
  }
  PREFIXD_RETURN_IF_ERROR(WalkPngChunks(b));
  return Sized(ImageFormat::kPng, width, height, b.size());
}

// ---- JPEG ----

// SOF0..SOF15 carry the frame's size; C4 (DHT), C8 (JPG) and CC (DAC) share the range.
bool IsFrameHeader(uint8_t marker) {
  return marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
}

// Markers with no length after them: TEM, RST0..7, SOI.
bool IsStandalone(uint8_t marker) {
  return marker == 0x01 || (marker >= 0xd0 && marker <= 0xd8);
}

// The frame header at `at` (just past its marker): length, precision, height, width.
Result<ImageInfo> JpegFrame(std::string_view b, size_t at) {
  if (b.size() - at < 7) return Truncated("JPEG", "inside its frame header", b.size());
  return Sized(ImageFormat::kJpeg, Be16(b, at + 5), Be16(b, at + 3), b.size());
}

Result<ImageInfo> ReadJpeg(std::string_view b) {
  size_t at = 2;  // past SOI
  for (;;) {
    if (at >= b.size()) return Truncated("JPEG", "before its frame header", b.size());
    if (uint8_t(b[at]) != 0xff) {
      return Status::InvalidArgument("JPEG: byte " + std::to_string(at) + " is " +
                                     Hex(uint8_t(b[at])) + " where a marker (0xff) belongs");
    }
    while (at < b.size() && uint8_t(b[at]) == 0xff) ++at;  // fill bytes
    if (at >= b.size()) return Truncated("JPEG", "before its frame header", b.size());
    const uint8_t marker = uint8_t(b[at++]);
    if (IsStandalone(marker)) continue;
    if (marker == 0xd9 || marker == 0xda) {
      return Status::InvalidArgument(std::string("JPEG has no frame header (SOFn) before its ") +
                                     (marker == 0xda ? "scan" : "end"));
    }
    if (IsFrameHeader(marker)) return JpegFrame(b, at);
    if (b.size() - at < 2) return Truncated("JPEG", "inside a segment's length", b.size());
    const uint32_t length = Be16(b, at);
    if (length < 2) {
      return Status::InvalidArgument("JPEG segment " + Hex(marker) + " at byte " +
                                     std::to_string(at) + " declares a length of " +
                                     std::to_string(length));
    }
    at += length;  // at most 65535 past an index below size: no overflow
  }
}

// ---- GIF ----

Result<ImageInfo> ReadGif(std::string_view b) {
  if (b.size() < 6) return Truncated("GIF", "inside its signature", b.size());
  if (b.substr(0, 6) != "GIF87a" && b.substr(0, 6) != "GIF89a") {
    return Status::InvalidArgument("not a GIF: its version is " + FourCc(b.substr(2), 0) +
                                   " (GIF87a or GIF89a)");
  }
  if (b.size() < 13) return Truncated("GIF", "inside its logical screen descriptor", b.size());
  return Sized(ImageFormat::kGif, Le16(b, 6), Le16(b, 8), b.size());
}

// ---- WebP ----

Result<ImageInfo> WebpLossy(std::string_view b) {  // "VP8 ": a key frame's header
  if (b.size() < 30) return Truncated("WebP", "inside its VP8 frame header", b.size());
  if ((uint8_t(b[20]) & 1) != 0) {
    return Status::InvalidArgument("WebP's VP8 data does not start with a key frame");
  }
  if (b.substr(23, 3) != std::string_view("\x9d\x01\x2a", 3)) {
    return Status::InvalidArgument("WebP's VP8 frame has no start code (9d 01 2a)");
  }
  return Sized(ImageFormat::kWebp, Le16(b, 26) & 0x3fff, Le16(b, 28) & 0x3fff, b.size());
}

Result<ImageInfo> WebpLossless(std::string_view b) {  // "VP8L": 14 bits each, minus one
  if (b.size() < 25) return Truncated("WebP", "inside its VP8L header", b.size());
  if (uint8_t(b[20]) != 0x2f) {
    return Status::InvalidArgument("WebP's VP8L data does not start with its signature (0x2f)");
  }
  const uint32_t bits = Le32(b, 21);
  return Sized(ImageFormat::kWebp, (bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1, b.size());
}

Result<ImageInfo> WebpExtended(std::string_view b) {  // "VP8X": the canvas, 24 bits minus one
  if (b.size() < 30) return Truncated("WebP", "inside its VP8X header", b.size());
  return Sized(ImageFormat::kWebp, Le24(b, 24) + 1, Le24(b, 27) + 1, b.size());
}

Result<ImageInfo> ReadWebp(std::string_view b) {
  if (b.size() < 12) return Truncated("WebP", "inside its RIFF header", b.size());
  if (b.substr(8, 4) != "WEBP") {
    return Status::InvalidArgument("a RIFF file of type " + FourCc(b, 8) + ", not WEBP");
  }
  const uint64_t riff_end = 8 + uint64_t(Le32(b, 4));
  if (riff_end > b.size()) {
    return Truncated("WebP", "before the " + std::to_string(riff_end) +
                                 " bytes its RIFF header declares",
                     b.size());
  }
  if (b.size() < 20) return Truncated("WebP", "inside its first chunk's header", b.size());
  const std::string_view chunk = b.substr(12, 4);
  if (chunk == "VP8 ") return WebpLossy(b);
  if (chunk == "VP8L") return WebpLossless(b);
  if (chunk == "VP8X") return WebpExtended(b);
  return Status::InvalidArgument("WebP's first chunk is " + FourCc(b, 12) +
                                 ", not VP8, VP8L or VP8X");
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kGif: return "GIF";
    case ImageFormat::kWebp: return "WebP";
  }
  return "?";
}

size_t Base64DecodedSize(std::string_view base64) {
  size_t padding = 0;
  for (size_t i = base64.size(); i > 0 && padding < 2 && base64[i - 1] == '='; --i) ++padding;
  const size_t whole = base64.size() / 4 * 3;
  return whole >= padding ? whole - padding : 0;
}

Result<std::string> DecodeBase64(std::string_view base64) {
  if (base64.empty()) return Status::InvalidArgument("not base64: it is empty");
  if (base64.size() > size_t(INT_MAX)) return Status::InvalidArgument("not base64: too long");
  size_t padding = 0;
  if (base64.back() == '=') {
    padding = base64.size() >= 2 && base64[base64.size() - 2] == '=' ? 2 : 1;
  }
  for (size_t i = 0; i + padding < base64.size(); ++i) {
    if (!IsBase64Char(base64[i])) {
      return Status::InvalidArgument("not base64: byte " + std::to_string(i) + " is " +
                                     ByteName(base64[i]) +
                                     (base64[i] == '=' ? " before the end (misplaced padding)"
                                                       : ""));
    }
  }
  if (base64.size() % 4 != 0) {
    return Status::InvalidArgument("not base64: its length, " + std::to_string(base64.size()) +
                                   ", is not a multiple of 4 (missing or extra padding)");
  }
  std::string out(base64.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(base64.data()),
                                int(base64.size()));
  if (n < 0) return Status::InvalidArgument("not base64 (OpenSSL refused it)");
  out.resize(size_t(n) - padding);  // EVP_DecodeBlock counts the padding as zero bytes
  return out;
}

Result<ImageInfo> ReadImageHeader(std::string_view b) {
  if (b.starts_with("\x89PNG")) return ReadPng(b);
  if (b.starts_with("\xff\xd8")) return ReadJpeg(b);
  if (b.starts_with("GIF8")) return ReadGif(b);
  if (b.starts_with("RIFF")) return ReadWebp(b);
  return Status::InvalidArgument("not a PNG, JPEG, GIF or WebP file (it starts with " +
                                 LeadingBytes(b) + ")");
}

}  // namespace prefixd::server
