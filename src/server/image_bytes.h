// An image's bytes, read without decoding a pixel: strict base64, and the format and size from
// the file's own header (PNG, JPEG, GIF, WebP). Clients mislabel media types, so the format is
// always the one the bytes say, never the one declared beside them. A decompression bomb shows
// its size in its header and is refused from it (image_part.h), before anything is decoded.
//
// Pure functions; thread-safe; never throw. Errors are InvalidArgument with a sentence that
// says what is wrong ("not base64: byte 17 is ' '", "truncated PNG: ..."); the caller adds
// which part of the request it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace prefixd::server {

enum class ImageFormat { kPng, kJpeg, kGif, kWebp };

// "PNG", "JPEG", "GIF", "WebP".
const char* ImageFormatName(ImageFormat format);

struct ImageInfo {
  ImageFormat format = ImageFormat::kPng;
  uint32_t width = 0;   // pixels, > 0
  uint32_t height = 0;  // pixels, > 0
  size_t n_bytes = 0;   // the file's size
};

// The bytes `base64` decodes to in the standard alphabet (RFC 4648 section 4): A-Z a-z 0-9 + /,
// length a multiple of 4, '=' only as the last one or two characters. Anything else
// (whitespace, the URL-safe alphabet, missing or misplaced padding) is an error naming the
// first offending byte. "" is an error: an image has bytes.
Result<std::string> DecodeBase64(std::string_view base64);

// How many bytes `base64` decodes to, from its length and padding alone (no check of its
// characters): lets a caller refuse an oversized image before decoding it.
size_t Base64DecodedSize(std::string_view base64);

// The format and size of the image file `bytes`, from its header:
//   PNG:  the signature and the IHDR chunk; the chunks are walked to IEND (lengths only), so a
//         file cut anywhere is refused;
//   JPEG: SOI, then the segments up to the first frame header (SOF0..SOF15 but DHT, JPG, DAC);
//   GIF:  GIF87a / GIF89a and the logical screen descriptor;
//   WebP: RIFF/WEBP, whose RIFF size the file must hold, then a VP8, VP8L or VP8X header.
// Any other file, a header cut short, or a width or height of 0 is an error.
Result<ImageInfo> ReadImageHeader(std::string_view bytes);

}  // namespace prefixd::server
