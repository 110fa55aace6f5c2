// Tiny image files for the server's unit tests (never linked into prefixd): real files written by
// real encoders, and files built here with the header fields the tests choose (PNG, JPEG, GIF,
// and WebP's three kinds), with the structure ReadImageHeader walks but no pixels worth decoding.
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace prefixd::server::test_images {

// Real files, base64: a 1x1 PNG (RGBA, one IDAT), the classic 1x1 GIF89a, and the 1x1 WebP
// probes browsers' feature tests use: lossy (VP8), lossless (VP8L), and with alpha (VP8X).
inline constexpr char kPng1x1[] =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
inline constexpr char kGif1x1[] = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7";
inline constexpr char kWebpLossy1x1[] = "UklGRiQAAABXRUJQVlA4IBgAAAAwAQCdASoBAAEAAwA0JaQAA3AA/vuUAAA=";
inline constexpr char kWebpLossless1x1[] = "UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==";
inline constexpr char kWebpAlpha1x1[] =
    "UklGRkoAAABXRUJQVlA4WAoAAAAQAAAAAAAAAAAAQUxQSAwAAAARBxAR/Q9ERP8DAABWUDggGAAAABQBAJ0BKgEAAQAAAP4AAA3AAP7mtQAAAA==";

inline std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

inline std::string DataUrl(std::string_view bytes, const std::string& media_type = "image/png") {
  return "data:" + media_type + ";base64," + Base64(bytes);
}

inline void PutBe32(std::string* s, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) s->push_back(char((v >> shift) & 0xff));
}
inline void PutBe16(std::string* s, uint32_t v) {
  s->push_back(char((v >> 8) & 0xff));
  s->push_back(char(v & 0xff));
}
inline void PutLe(std::string* s, uint32_t v, int n_bytes) {
  for (int i = 0; i < n_bytes; ++i) s->push_back(char((v >> (8 * i)) & 0xff));
}

// A PNG chunk; the CRC is left 0 (ReadImageHeader walks lengths, it checks no CRC).
inline void PngChunk(std::string* s, std::string_view type, std::string_view data) {
  PutBe32(s, uint32_t(data.size()));
  s->append(type);
  s->append(data);
  PutBe32(s, 0);
}

// A PNG of width x height: signature, IHDR (8-bit RGB), one IDAT, IEND.
inline std::string Png(uint32_t width, uint32_t height) {
  std::string s("\x89PNG\r\n\x1a\n", 8), ihdr;
  PutBe32(&ihdr, width);
  PutBe32(&ihdr, height);
  ihdr.append(std::string("\x08\x02\x00\x00\x00", 5));
  PngChunk(&s, "IHDR", ihdr);
  PngChunk(&s, "IDAT", std::string("\x78\x9c\x63\x00\x00", 5));
  PngChunk(&s, "IEND", "");
  return s;
}

// A baseline JPEG's header: SOI, APP0 (JFIF), DQT, DHT, a frame header of `sof` (0xc0
// baseline, 0xc2 progressive) for width x height, then SOS and EOI. Fill bytes before the
// frame header when `fill`.
inline std::string Jpeg(uint32_t width, uint32_t height, uint8_t sof = 0xc0, bool fill = false) {
  std::string s("\xff\xd8", 2);
  s.append("\xff\xe0", 2);
  PutBe16(&s, 16);
  s.append(std::string("JFIF\0\x01\x01\x00\x00\x01\x00\x01\x00\x00", 14));
  s.append("\xff\xdb", 2);  // DQT: one table of 64 bytes
  PutBe16(&s, 67);
  s.append(std::string(65, '\x01'));
  s.append("\xff\xc4", 2);  // DHT: a range's marker that is not a frame header
  PutBe16(&s, 5);
  s.append(std::string("\x00\x00\x00", 3));
  if (fill) s.append("\xff\xff\xff", 3);
  s.push_back('\xff');
  s.push_back(char(sof));
  PutBe16(&s, 17);
  s.push_back('\x08');
  PutBe16(&s, height);
  PutBe16(&s, width);
  s.append(std::string("\x03\x01\x11\x00\x02\x11\x01\x03\x11\x01", 10));
  s.append("\xff\xda", 2);
  PutBe16(&s, 12);
  s.append(std::string(10, '\x00'));
  s.append("\xff\xd9", 2);
  return s;
}

inline std::string Gif(uint32_t width, uint32_t height) {
  std::string s = "GIF89a";
  PutLe(&s, width, 2);
  PutLe(&s, height, 2);
  s.append(std::string("\x00\x00\x00", 3));
  s.push_back('\x3b');  // trailer
  return s;
}

// RIFF/WEBP around one chunk `fourcc` holding `data`.
inline std::string Riff(std::string_view fourcc, const std::string& data) {
  std::string body = "WEBP";
  body.append(fourcc);
  PutLe(&body, uint32_t(data.size()), 4);
  body.append(data);
  std::string s = "RIFF";
  PutLe(&s, uint32_t(body.size()), 4);
  return s + body;
}

inline std::string WebpLossy(uint32_t width, uint32_t height) {
  std::string d("\x30\x01\x00\x9d\x01\x2a", 6);  // a key frame's tag, the start code
  PutLe(&d, width, 2);
  PutLe(&d, height, 2);
  d.append(std::string(8, '\0'));
  return Riff("VP8 ", d);
}

inline std::string WebpLossless(uint32_t width, uint32_t height) {
  std::string d("\x2f", 1);
  PutLe(&d, (width - 1) | (height - 1) << 14, 4);
  d.append(std::string(4, '\0'));
  return Riff("VP8L", d);
}

inline std::string WebpExtended(uint32_t width, uint32_t height) {
  std::string d(4, '\0');
  PutLe(&d, width - 1, 3);
  PutLe(&d, height - 1, 3);
  return Riff("VP8X", d);
}

}  // namespace prefixd::server::test_images
