#include "util/coding.h"

#include <gtest/gtest.h>

namespace prefixd {
namespace {

TEST(Coding, FixedWidthIsLittleEndian) {
  std::vector<uint8_t> out;
  PutFixed16(&out, 0x0102);
  PutFixed32(&out, 0x03040506u);
  PutFixed64(&out, 0x0708090A0B0C0D0Eull);
  const std::vector<uint8_t> want = {0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0E, 0x0D,
                                     0x0C, 0x0B, 0x0A, 0x09, 0x08, 0x07};
  EXPECT_EQ(out, want);
  EXPECT_EQ(DecodeFixed16(out.data()), 0x0102);
  EXPECT_EQ(DecodeFixed32(out.data() + 2), 0x03040506u);
  EXPECT_EQ(DecodeFixed64(out.data() + 6), 0x0708090A0B0C0D0Eull);
}

TEST(Coding, EncodeMatchesPut) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, uint64_t{0x8000000000000001ull}}) {
    uint8_t b[8];
    EncodeFixed64(b, v);
    std::vector<uint8_t> put;
    PutFixed64(&put, v);
    EXPECT_EQ(std::vector<uint8_t>(b, b + 8), put);
    EXPECT_EQ(DecodeFixed64(b), v);
    EncodeFixed32(b, uint32_t(v));
    EXPECT_EQ(DecodeFixed32(b), uint32_t(v));
  }
}

}  // namespace
}  // namespace prefixd
