// AES-256-GCM sealing: a round trip, and every kind of change refused.
#include "util/aead.h"

#include <gtest/gtest.h>

namespace prefixd {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(Aead, SealsAndOpensAndRefusesEveryChange) {
  const AeadKey key = DeriveAeadKey("secret", "purpose");
  const std::vector<uint8_t> aad = Bytes("identity"), plain = Bytes("the prompt's tokens");
  std::vector<uint8_t> sealed;
  ASSERT_TRUE(AeadSeal(key, aad, plain, &sealed).ok());
  ASSERT_EQ(sealed.size(), plain.size() + kAeadOverheadBytes);
  EXPECT_EQ(std::search(sealed.begin(), sealed.end(), plain.begin(), plain.end()), sealed.end())
      << "the plaintext is not in the sealed bytes";
  auto open = AeadOpen(key, aad, sealed);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_EQ(*open, plain);

  for (size_t i = 0; i < sealed.size(); ++i) {  // nonce, ciphertext and tag alike
    std::vector<uint8_t> bad = sealed;
    bad[i] ^= 0x01;
    EXPECT_TRUE(AeadOpen(key, aad, bad).status().IsCorruption()) << "byte " << i;
  }
  EXPECT_TRUE(AeadOpen(key, Bytes("another identity"), sealed).status().IsCorruption());
  EXPECT_TRUE(AeadOpen(DeriveAeadKey("secret", "other purpose"), aad, sealed).status().IsCorruption());
  EXPECT_TRUE(AeadOpen(DeriveAeadKey("other secret", "purpose"), aad, sealed).status().IsCorruption());
  std::vector<uint8_t> cut(sealed.begin(), sealed.end() - 1);
  EXPECT_TRUE(AeadOpen(key, aad, cut).status().IsCorruption());
  EXPECT_TRUE(AeadOpen(key, aad, std::vector<uint8_t>(kAeadOverheadBytes - 1)).status().IsCorruption());
}

TEST(Aead, EachSealHasItsOwnNonceAndEmptyPlaintextsSealToo) {
  const AeadKey key = DeriveAeadKey("secret", "purpose");
  std::vector<uint8_t> a, b;
  ASSERT_TRUE(AeadSeal(key, {}, Bytes("same"), &a).ok());
  ASSERT_TRUE(AeadSeal(key, {}, Bytes("same"), &b).ok());
  EXPECT_NE(a, b) << "a random nonce per seal";
  std::vector<uint8_t> empty;
  ASSERT_TRUE(AeadSeal(key, {}, std::span<const uint8_t>(), &empty).ok());
  auto open = AeadOpen(key, {}, empty);
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(open->empty());
}

}  // namespace
}  // namespace prefixd
