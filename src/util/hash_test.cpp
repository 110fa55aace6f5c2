#include "util/hash.h"

#include <gtest/gtest.h>

#include <random>
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

TEST(HashTest, Crc32cKnownVector) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cSoftware(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
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

}  // namespace
}  // namespace prefixd
