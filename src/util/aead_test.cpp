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

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// RFC 5869, appendix A, test cases 1 and 3 (the first 32 of their 42 output bytes).
TEST(Aead, HkdfMatchesTheRfc5869Vectors) {
  const std::string ikm(22, '\x0b');
  auto one = HkdfAeadKey(ikm, Unhex("000102030405060708090a0b0c"), Unhex("f0f1f2f3f4f5f6f7f8f9"));
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(DigestHex(*one), "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf");
  auto three = HkdfAeadKey(ikm, "", "");
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ(DigestHex(*three), "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d");
  EXPECT_NE(DigestHex(*HkdfAeadKey(ikm, "", "another purpose")), DigestHex(*three));
}

}  // namespace
}  // namespace prefixd
