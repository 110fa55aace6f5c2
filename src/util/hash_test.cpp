#include "util/hash.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace prefixd {
namespace {

TEST(HashTest, Sha256KnownVector) {
  EXPECT_EQ(DigestHex(Sha256Of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.Finish(), Sha256Of("abc"));
}

TEST(HashTest, Sha256PeekGivesPrefixDigestsAndContinues) {
  Sha256 h;
  EXPECT_EQ(DigestHex(h.Peek()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");  // ""
  h.Update("a");
  EXPECT_EQ(h.Peek(), Sha256Of("a"));
  h.Update("bc");
  EXPECT_EQ(DigestHex(h.Peek()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(h.Finish(), Sha256Of("abc"));
}

// RFC 4231 section 4, the HMAC-SHA-256 results of test cases 1-4, 6 and 7 (case 5 checks a
// truncated output, which prefixd never uses).
TEST(HashTest, HmacSha256Rfc4231) {
  struct Case {
    std::string key, data, mac;
  };
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(char(i));
  const std::string big_key(131, '\xaa');
  const Case cases[] = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {big_key, "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {big_key,
       "This is a test using a larger than block-size key and a larger than block-size data. "
       "The key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const Case& c : cases) EXPECT_EQ(DigestHex(HmacSha256(c.key, c.data)), c.mac) << c.data;
  // An empty key and message are valid input (HMAC of "" under "").
  EXPECT_EQ(DigestHex(HmacSha256("", "")),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(HashTest, DigestsEqualConstantTime) {
  Digest a = Sha256Of("a");
  Digest b = a;
  EXPECT_TRUE(DigestsEqualConstantTime(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(DigestsEqualConstantTime(a, b));
  b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(DigestsEqualConstantTime(a, b));
}

TEST(HashTest, Crc32cKnownVector) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cSoftware(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(HashTest, Crc32cCombineJoinsPiecesTakenApart) {
  std::vector<uint8_t> data(40000);
  uint32_t x = 12345;
  for (auto& b : data) b = uint8_t((x = x * 1103515245u + 12345u) >> 16);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {size_t(0), size_t(1), size_t(7), size_t(4096), size_t(13000), data.size()}) {
    const uint32_t a = Crc32c(data.data(), split);
    const uint32_t b = Crc32c(data.data() + split, data.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - split), whole) << split;
  }
  // Three pieces joined left to right, and a wrong length gives another crc.
  const uint32_t p0 = Crc32c(data.data(), 100), p1 = Crc32c(data.data() + 100, 20000);
  const uint32_t p2 = Crc32c(data.data() + 20100, data.size() - 20100);
  EXPECT_EQ(Crc32cCombine(Crc32cCombine(p0, p1, 20000), p2, data.size() - 20100), whole);
  EXPECT_NE(Crc32cCombine(Crc32cCombine(p0, p1, 19999), p2, data.size() - 20100), whole);
}

TEST(HashTest, Crc32cFastPathEqualsTablesAtEveryLengthAndSplit) {
  std::mt19937 rng(5);
  std::vector<uint8_t> data(1000);
  for (auto& b : data) b = uint8_t(rng());
  for (size_t n = 0; n < data.size(); n += 37) {
    EXPECT_EQ(Crc32c(data.data(), n), Crc32cSoftware(0, data.data(), n)) << n;
    size_t cut = n / 3;
    EXPECT_EQ(Crc32cExtend(Crc32c(data.data(), cut), data.data() + cut, n - cut),
              Crc32c(data.data(), n));
  }
  EXPECT_EQ(Crc32cUnmask(Crc32cMask(0x12345678u)), 0x12345678u);
}

// Buffers of three 4 KiB lanes and more take the three-chain path and join the lanes.
TEST(HashTest, Crc32cThreeLanePathEqualsTablesOnLongBuffers) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(3 * 3 * 4096 + 1000);
  for (auto& b : data) b = uint8_t(rng());
  for (size_t n : {size_t(12287), size_t(12288), size_t(12289), size_t(24576), size_t(30001),
                   data.size()}) {
    EXPECT_EQ(Crc32c(data.data(), n), Crc32cSoftware(0, data.data(), n)) << n;
    for (size_t cut : {size_t(1), size_t(4097), n / 2}) {
      EXPECT_EQ(Crc32cExtend(Crc32c(data.data(), cut), data.data() + cut, n - cut),
                Crc32cSoftware(0, data.data(), n)) << n << " cut " << cut;
    }
  }
}

}  // namespace
}  // namespace prefixd
