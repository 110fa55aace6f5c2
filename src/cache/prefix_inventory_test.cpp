// Listing and evicting whole prefix trees: PrefixCache (RAM) and the disk records.
#include "cache/prefix_inventory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "cache/cache_test_util.h"
#include "cache/store_tier.h"
#include "cache/prefix_cache.h"

namespace prefixd::cache {
namespace {

using testing::Iota;
using testing::MakePayload;

constexpr size_t kB = 4;
const Digest kDomain = testing::TestDomain(1);
const Digest kOther = testing::TestDomain(2);

std::span<const Token> First(const std::vector<Token>& t, size_t n) {
  return std::span<const Token>(t).first(n);
}

PrefixCache::Options Hybrid() { return PrefixCache::Options{kB, 1 << 20, true, true}; }

// Blocks 0..n-1 of `t` (10 bytes of rows each) and a Snapshot at the end of the last one.
void InsertTree(PrefixCache& c, const Digest& domain, const std::vector<Token>& t, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    ASSERT_FALSE(IsRefused(c.InsertBlock(domain, First(t, (k + 1) * kB), MakePayload(10, k))));
  }
  ASSERT_FALSE(IsRefused(c.InsertSnapshot(domain, First(t, n * kB), SnapshotKind::kTail,
                                          MakePayload(7), nullptr)));
}

const PrefixSummary* Find(const std::vector<PrefixSummary>& list, const ChainHash& root) {
  auto it = std::find_if(list.begin(), list.end(),
                         [&](const PrefixSummary& s) { return s.root == root; });
  return it == list.end() ? nullptr : &*it;
}

TEST(PrefixInventoryTest, ListsOneSummaryPerTreeAndDomain) {
  PrefixCache c(Hybrid());
  auto a = Iota(12), b = Iota(8, 100), shortp = Iota(3, 500);
  InsertTree(c, kDomain, a, 3);
  InsertTree(c, kDomain, b, 2);
  InsertTree(c, kOther, a, 1);
  // A prompt shorter than a Block: a Tail (rows + Snapshot) under the domain root.
  ASSERT_FALSE(IsRefused(c.InsertSnapshot(kDomain, shortp, SnapshotKind::kTail, MakePayload(5),
                                          MakePayload(3))));
  std::vector<PrefixSummary> list = c.ListPrefixes();
  ASSERT_EQ(list.size(), 4u);
  const PrefixSummary* ta = Find(list, NextChainHash(kDomain, First(a, kB)));
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->domain, kDomain);
  EXPECT_EQ(ta->blocks, 3u);
  EXPECT_EQ(ta->snapshots, 1u);
  EXPECT_EQ(ta->tails, 0u);
  EXPECT_EQ(ta->n_tokens, 12u);
  EXPECT_EQ(ta->bytes, 3 * 10 + 7u);
  EXPECT_GT(ta->created_unix_ms, 0u);
  EXPECT_GE(ta->used_unix_ms, ta->created_unix_ms);
  const PrefixSummary* tail = Find(list, TailKey(kDomain, shortp));
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(tail->tails, 1u);
  EXPECT_EQ(tail->n_tokens, 3u);
  EXPECT_EQ(tail->bytes, 8u);
  const PrefixSummary* other = Find(list, NextChainHash(kOther, First(a, kB)));
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->domain, kOther);
}

TEST(PrefixInventoryTest, EvictPrefixDropsOneTreeOnly) {
  PrefixCache c(Hybrid());
  auto a = Iota(12), b = Iota(8, 100);
  InsertTree(c, kDomain, a, 3);
  InsertTree(c, kDomain, b, 2);
  const ChainHash root_a = NextChainHash(kDomain, First(a, kB));
  EXPECT_EQ(c.EvictPrefix(kOther, root_a), 0u) << "another domain holds no such tree";
  EXPECT_EQ(c.EvictPrefix(kDomain, root_a), 4u);  // 3 Blocks + 1 Snapshot
  ASSERT_TRUE(c.CheckConsistency().ok());
  std::vector<PrefixSummary> list = c.ListPrefixes();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].root, NextChainHash(kDomain, First(b, kB)));
  EXPECT_EQ(c.Lookup(kDomain, a, 11).n_tokens, 0u);
  EXPECT_EQ(c.Lookup(kDomain, b, 8).n_tokens, 8u);
  EXPECT_EQ(c.EvictPrefix(kDomain, root_a), 0u);
}

TEST(PrefixInventoryTest, EvictPrefixKeepsWhatARestorePins) {
  PrefixCache c(Hybrid());
  auto a = Iota(12);
  InsertTree(c, kDomain, a, 3);
  PrefixCache::Match held = c.Lookup(kDomain, a, 12);  // pins the Snapshot and the rows
  ASSERT_EQ(held.n_tokens, 12u);
  EXPECT_EQ(c.EvictPrefix(kDomain, NextChainHash(kDomain, First(a, kB))), 0u);
  ASSERT_TRUE(c.CheckConsistency().ok());
  held = {};
  EXPECT_EQ(c.EvictPrefix(kDomain, NextChainHash(kDomain, First(a, kB))), 4u);
  EXPECT_TRUE(c.ListPrefixes().empty());
}

class DiskInventoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("prefixd-inventory-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    store::DiskStore::Options so;
    so.dir = dir_.string();
    so.quota_bytes = 1 << 20;
    auto s = store::DiskStore::Open(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    disk_ = std::make_unique<StoreTier>(*store_, ram_);
  }
  void TearDown() override {
    disk_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Spill(const Digest& domain, const std::vector<Token>& t, size_t n_blocks) {
    std::vector<PayloadRef> rows;
    for (size_t k = 0; k < n_blocks; ++k) rows.push_back(MakePayload(10, k));
    disk_->SpillBlocks(domain, First(t, n_blocks * kB), 0, rows);
    disk_->SpillSnapshot(domain, First(t, n_blocks * kB + 1), SnapshotKind::kTail,
                         MakePayload(7), MakePayload(2));
    store_->Flush();
  }

  std::filesystem::path dir_;
  PrefixCache ram_{Hybrid()};
  std::unique_ptr<store::DiskStore> store_;
  std::unique_ptr<StoreTier> disk_;
};

TEST_F(DiskInventoryTest, GroupsRecordsByTreeAndRemovesOne) {
  auto a = Iota(13), b = Iota(9, 100);
  Spill(kDomain, a, 3);
  Spill(kDomain, b, 2);
  std::vector<PrefixSummary> list = ListStorePrefixes(*store_, kB);
  ASSERT_EQ(list.size(), 2u);
  const ChainHash root_a = NextChainHash(kDomain, First(a, kB));
  const PrefixSummary* ta = Find(list, root_a);
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->blocks, 3u);
  EXPECT_EQ(ta->tails, 2u);  // the Tail's rows and the Snapshot at its end
  EXPECT_EQ(ta->n_tokens, 13u);
  EXPECT_GT(ta->bytes, 3 * 10 + 7 + 2u);  // record files: headers and checksums too
  EXPECT_GT(ta->used_unix_ms, 0u);

  EXPECT_EQ(RemoveStorePrefix(*store_, kOther, root_a), 0u);
  EXPECT_EQ(RemoveStorePrefix(*store_, kDomain, root_a), 5u);
  list = ListStorePrefixes(*store_, kB);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].root, NextChainHash(kDomain, First(b, kB)));
}

}  // namespace
}  // namespace prefixd::cache
