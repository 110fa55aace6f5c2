#include "server/image_bytes.h"

#include <gtest/gtest.h>

#include "server/test_images.h"

namespace prefixd::server {
namespace {

namespace ti = test_images;

std::string Decoded(std::string_view base64) {
  Result<std::string> r = DecodeBase64(base64);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

std::string DecodeError(std::string_view base64) {
  Result<std::string> r = DecodeBase64(base64);
  EXPECT_FALSE(r.ok()) << "decoded '" << base64 << "'";
  return r.ok() ? "" : r.status().message();
}

ImageInfo Read(std::string_view bytes) {
  Result<ImageInfo> r = ReadImageHeader(bytes);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ImageInfo{};
}

std::string ReadError(std::string_view bytes) {
  Result<ImageInfo> r = ReadImageHeader(bytes);
  EXPECT_FALSE(r.ok()) << "read " << bytes.size() << " bytes as an image";
  return r.ok() ? "" : r.status().message();
}

void ExpectImage(std::string_view bytes, ImageFormat format, uint32_t width, uint32_t height) {
  ImageInfo i = Read(bytes);
  EXPECT_EQ(i.format, format) << ImageFormatName(i.format);
  EXPECT_EQ(i.width, width);
  EXPECT_EQ(i.height, height);
  EXPECT_EQ(i.n_bytes, bytes.size());
}

// Every proper prefix of a file is refused (never read out of bounds: ASan builds check).
void ExpectEveryPrefixRefused(const std::string& file, size_t from = 0) {
  for (size_t n = from; n < file.size(); ++n) {
    Result<ImageInfo> r = ReadImageHeader(std::string_view(file).substr(0, n));
    EXPECT_FALSE(r.ok()) << "a prefix of " << n << " of " << file.size() << " bytes was read";
  }
}

TEST(Base64, DecodesTheRfc4648Vectors) {
  EXPECT_EQ(Decoded("Zg=="), "f");
  EXPECT_EQ(Decoded("Zm8="), "fo");
  EXPECT_EQ(Decoded("Zm9v"), "foo");
  EXPECT_EQ(Decoded("Zm9vYg=="), "foob");
  EXPECT_EQ(Decoded("Zm9vYmE="), "fooba");
  EXPECT_EQ(Decoded("Zm9vYmFy"), "foobar");
  EXPECT_EQ(Decoded("+/+/"), "\xfb\xff\xbf");
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(char(c));
  EXPECT_EQ(Decoded(ti::Base64(all)), all);
}

TEST(Base64, SizeComesFromLengthAndPadding) {
  EXPECT_EQ(Base64DecodedSize("Zg=="), 1u);
  EXPECT_EQ(Base64DecodedSize("Zm8="), 2u);
  EXPECT_EQ(Base64DecodedSize("Zm9vYmFy"), 6u);
  EXPECT_EQ(Base64DecodedSize(""), 0u);
}

TEST(Base64, RefusesWhatIsNotStrictBase64AndSaysWhere) {
  EXPECT_NE(DecodeError("").find("empty"), std::string::npos);
  EXPECT_NE(DecodeError("Zm9v YmFy").find("byte 4 is a space"), std::string::npos);
  EXPECT_NE(DecodeError("Zm9v\nYmFy").find("byte 4 is whitespace"), std::string::npos);
  EXPECT_NE(DecodeError("Zm9-").find("byte 3 is '-'"), std::string::npos);  // URL-safe
  EXPECT_NE(DecodeError("Zm9_").find("byte 3 is '_'"), std::string::npos);
  EXPECT_NE(DecodeError("Zm9v\x80xyz").find("byte 4 is 0x80"), std::string::npos);
  EXPECT_NE(DecodeError("Z=g=").find("misplaced padding"), std::string::npos);
  EXPECT_NE(DecodeError("Zg===").find("misplaced padding"), std::string::npos);
  EXPECT_NE(DecodeError("Zg").find("not a multiple of 4"), std::string::npos);
  EXPECT_NE(DecodeError("Zg=").find("not a multiple of 4"), std::string::npos);
  EXPECT_NE(DecodeError("Zm9vY").find("not a multiple of 4"), std::string::npos);
}

TEST(ImageHeader, ReadsRealFilesOfEachFormat) {
  ExpectImage(Decoded(ti::kPng1x1), ImageFormat::kPng, 1, 1);
  ExpectImage(Decoded(ti::kGif1x1), ImageFormat::kGif, 1, 1);
  ExpectImage(Decoded(ti::kWebpLossy1x1), ImageFormat::kWebp, 1, 1);
  ExpectImage(Decoded(ti::kWebpLossless1x1), ImageFormat::kWebp, 1, 1);
  ExpectImage(Decoded(ti::kWebpAlpha1x1), ImageFormat::kWebp, 1, 1);
}

TEST(ImageHeader, ReadsEachFormatsSizeFields) {
  ExpectImage(ti::Png(1024, 768), ImageFormat::kPng, 1024, 768);
  ExpectImage(ti::Png(100000, 100000), ImageFormat::kPng, 100000, 100000);  // limits: elsewhere
  ExpectImage(ti::Jpeg(640, 480), ImageFormat::kJpeg, 640, 480);
  ExpectImage(ti::Jpeg(65535, 3, 0xc2), ImageFormat::kJpeg, 65535, 3);  // progressive
  ExpectImage(ti::Jpeg(7, 9, 0xc0, /*fill=*/true), ImageFormat::kJpeg, 7, 9);
  ExpectImage(ti::Gif(300, 200), ImageFormat::kGif, 300, 200);
  ExpectImage(ti::WebpLossy(640, 480), ImageFormat::kWebp, 640, 480);
  ExpectImage(ti::WebpLossless(16384, 1), ImageFormat::kWebp, 16384, 1);
  ExpectImage(ti::WebpExtended(5000, 3000), ImageFormat::kWebp, 5000, 3000);
  ExpectImage(ti::WebpExtended(1 << 24, 1 << 24), ImageFormat::kWebp, 1u << 24, 1u << 24);
}

TEST(ImageHeader, RefusesEveryTruncatedFile) {
  ExpectEveryPrefixRefused(ti::Png(3, 2));
  ExpectEveryPrefixRefused(Decoded(ti::kPng1x1));
  // A JPEG is read up to its frame header: every cut before the frame's size is refused.
  const std::string jpeg = ti::Jpeg(3, 2);
  ExpectEveryPrefixRefused(jpeg.substr(0, jpeg.find("\xff\xc0") + 9));
  ExpectEveryPrefixRefused(ti::Gif(3, 2).substr(0, 13));
  ExpectEveryPrefixRefused(ti::WebpLossy(3, 2));
  ExpectEveryPrefixRefused(ti::WebpLossless(3, 2));
  ExpectEveryPrefixRefused(ti::WebpExtended(3, 2));
  ExpectEveryPrefixRefused(Decoded(ti::kWebpAlpha1x1));
}

TEST(ImageHeader, TruncationSaysWhereTheFileEnds) {
  const std::string png = ti::Png(3, 2);
  EXPECT_NE(ReadError(png.substr(0, 20)).find("truncated PNG: the file ends inside its IHDR"),
            std::string::npos);
  EXPECT_NE(ReadError(png.substr(0, png.size() - 14)).find("inside its 'IDAT' chunk"),
            std::string::npos);
  EXPECT_NE(ReadError(png.substr(0, png.size() - 12)).find("before IEND"), std::string::npos);
  const std::string webp = ti::WebpLossy(3, 2);
  EXPECT_NE(ReadError(webp.substr(0, webp.size() - 1)).find("its RIFF header declares"),
            std::string::npos);
}

TEST(ImageHeader, RefusesBrokenHeaders) {
  std::string png = ti::Png(3, 2);
  png[12] = 'X';  // IHDR -> XHDR
  EXPECT_NE(ReadError(png).find("not IHDR"), std::string::npos);
  EXPECT_NE(ReadError(ti::Png(0, 5)).find("declares a 0x5 image"), std::string::npos);
  EXPECT_NE(ReadError(ti::Png(0x80000000u, 1)).find("2^31-1"), std::string::npos);
  std::string no_data = ti::Png(3, 2);
  no_data.replace(no_data.find("IDAT"), 4, "tEXt");
  EXPECT_NE(ReadError(no_data).find("no IDAT"), std::string::npos);

  std::string jpeg = ti::Jpeg(3, 2);
  EXPECT_NE(ReadError(ti::Jpeg(0, 2)).find("declares a 0x2 image"), std::string::npos);
  std::string scan_first("\xff\xd8\xff\xda\x00\x02", 6);
  EXPECT_NE(ReadError(scan_first).find("no frame header (SOFn) before its scan"),
            std::string::npos);
  std::string bad_length("\xff\xd8\xff\xe0\x00\x01", 6);
  EXPECT_NE(ReadError(bad_length).find("declares a length of 1"), std::string::npos);
  std::string no_marker("\xff\xd8\x12\x34", 4);
  EXPECT_NE(ReadError(no_marker).find("where a marker (0xff) belongs"), std::string::npos);

  EXPECT_NE(ReadError("GIF87b\x01\x00\x01\x00\x00\x00\x00").find("GIF87a or GIF89a"),
            std::string::npos);
  std::string wave = ti::WebpLossy(3, 2);
  wave.replace(8, 4, "WAVE");
  EXPECT_NE(ReadError(wave).find("'WAVE', not WEBP"), std::string::npos);
  std::string other = ti::WebpLossy(3, 2);
  other.replace(12, 4, "ALPH");
  EXPECT_NE(ReadError(other).find("'ALPH', not VP8, VP8L or VP8X"), std::string::npos);
  std::string inter = ti::WebpLossy(3, 2);
  inter[20] = '\x01';
  EXPECT_NE(ReadError(inter).find("key frame"), std::string::npos);
  std::string no_start = ti::WebpLossy(3, 2);
  no_start[23] = '\x00';
  EXPECT_NE(ReadError(no_start).find("start code"), std::string::npos);
  std::string lossless = ti::WebpLossless(3, 2);
  lossless[20] = '\x00';
  EXPECT_NE(ReadError(lossless).find("signature (0x2f)"), std::string::npos);
}

TEST(ImageHeader, RefusesOtherFormatsNamingTheirFirstBytes) {
  EXPECT_NE(ReadError("%PDF-1.4\n").find("not a PNG, JPEG, GIF or WebP file (it starts with "
                                         "25 50 44 46 2d 31 2e 34)"),
            std::string::npos);
  EXPECT_NE(ReadError("BM\x36").find("starts with 42 4d 36"), std::string::npos);  // BMP
  EXPECT_NE(ReadError("x").find("starts with 78"), std::string::npos);
}

TEST(ImageHeader, ReadsTheFormatFromTheBytesWhateverTheName) {
  // The bytes decide: the same PNG is a PNG however it was labelled (image_part_test.cpp
  // checks a mislabelled data URL end to end).
  ExpectImage(Decoded(ti::Base64(ti::Png(5, 4))), ImageFormat::kPng, 5, 4);
  EXPECT_STREQ(ImageFormatName(ImageFormat::kWebp), "WebP");
  EXPECT_STREQ(ImageFormatName(ImageFormat::kJpeg), "JPEG");
}

}  // namespace
}  // namespace prefixd::server
