#include "cache/chain_hash.h"

#include <gtest/gtest.h>

#include "cache/cache_test_util.h"

namespace prefixd::cache {
namespace {

using testing::Iota;

TEST(ChainHashTest, DomainRootDependsOnEveryInput) {
  DomainInputs a;
  a.model_fingerprint.fill(1);
  a.layout_fingerprint.fill(2);
  a.tenant_salt = "t";
  DomainInputs b = a;
  EXPECT_EQ(DomainRoot(a), DomainRoot(b));
  b.model_fingerprint[31] ^= 1;
  EXPECT_NE(DomainRoot(a), DomainRoot(b));
  b = a;
  b.layout_fingerprint[0] ^= 1;
  EXPECT_NE(DomainRoot(a), DomainRoot(b));
  b = a;
  b.tenant_salt = "u";
  EXPECT_NE(DomainRoot(a), DomainRoot(b));
}

TEST(ChainHashTest, BlockHashCoversParentAndTokens) {
  Digest root = testing::TestDomain(1);
  auto t = Iota(8);
  ChainHash h = NextChainHash(root, t);
  EXPECT_EQ(h, NextChainHash(root, t));
  EXPECT_NE(h, NextChainHash(testing::TestDomain(2), t));
  t[7] = 100;
  EXPECT_NE(h, NextChainHash(root, t));
}

TEST(ChainHashTest, TailKeyIsItsOwnHashDomain) {
  Digest root = testing::TestDomain(1);
  auto t = Iota(4);
  EXPECT_NE(TailKey(root, t), NextChainHash(root, t));
  EXPECT_NE(TailKey(root, t), TailKey(root, std::span<const Token>(t).first(3)));
}

TEST(ChainHashTest, ChainHashesIteratesFullBlocksOnly) {
  Digest root = testing::TestDomain(3);
  auto t = Iota(10);
  auto hs = ChainHashes(root, t, 4);
  ASSERT_EQ(hs.size(), 2u);
  EXPECT_EQ(hs[0], NextChainHash(root, std::span<const Token>(t).first(4)));
  EXPECT_EQ(hs[1], NextChainHash(hs[0], std::span<const Token>(t).subspan(4, 4)));
}

}  // namespace
}  // namespace prefixd::cache
