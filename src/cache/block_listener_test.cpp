#include "cache/block_listener.h"

#include <gtest/gtest.h>

#include "cache/cache_test_util.h"
#include "cache/prefix_cache.h"

namespace prefixd::cache {
namespace {

using testing::Iota;
using testing::MakePayload;
using Kind = BlockEvent::Kind;

const Digest kDomain = testing::TestDomain(1);
const Digest kTenant = testing::TestDomain(2);

struct Recorder : BlockListener {
  void OnBlockEvent(BlockEvent e) override { events.push_back(std::move(e)); }
  std::vector<BlockEvent> events;
};

PrefixCache::Options WithListener(BlockListener* l, size_t budget = 1000) {
  PrefixCache::Options o;
  o.block_size = 4;
  o.ram_budget_bytes = budget;
  o.listener = l;
  return o;
}

void InsertChain(PrefixCache& c, const Digest& domain, std::span<const Token> t, size_t n) {
  std::vector<PayloadRef> rows;
  for (size_t i = 0; i < n; ++i) rows.push_back(MakePayload(10, i + 1));
  ASSERT_EQ(c.InsertBlocks(domain, t, 0, rows), InsertOutcome::kInserted);
}

TEST(BlockListenerTest, StoredParentFirstWithTokensAndChain) {
  Recorder r;
  PrefixCache c(WithListener(&r));
  auto t = Iota(12, 100);
  InsertChain(c, kDomain, t, 3);
  ASSERT_EQ(r.events.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const BlockEvent& e = r.events[k];
    EXPECT_EQ(e.kind, Kind::kStored);
    EXPECT_EQ(e.tier, Tier::kRam);
    EXPECT_EQ(e.domain, kDomain);
    EXPECT_EQ(e.depth, k + 1);
    EXPECT_EQ(e.tokens, std::vector<Token>(t.begin() + 4 * k, t.begin() + 4 * (k + 1)));
    EXPECT_EQ(e.parent, k == 0 ? kDomain : r.events[k - 1].hash);
  }
}

// A budget of two Blocks: the third insert evicts, child before parent.
TEST(BlockListenerTest, EvictionAndClearAreReported) {
  Recorder r;
  PrefixCache c(WithListener(&r, 25));
  auto a = Iota(8, 0);
  auto b = Iota(8, 50);
  InsertChain(c, kDomain, a, 2);
  InsertChain(c, kDomain, std::span(b).first(4), 1);  // evicts a's leaf
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.events[2].kind, Kind::kRemoved);
  EXPECT_EQ(r.events[2].hash, r.events[1].hash);
  EXPECT_EQ(r.events[2].domain, kDomain);
  EXPECT_TRUE(r.events[2].tokens.empty());
  EXPECT_EQ(r.events[3].kind, Kind::kStored);
  c.Clear();  // each Block removed (an indexer may ignore AllBlocksCleared), then the clear
  ASSERT_EQ(r.events.size(), 7u);
  EXPECT_EQ(r.events[4].kind, Kind::kRemoved);
  EXPECT_EQ(r.events[5].kind, Kind::kRemoved);
  EXPECT_EQ(r.events[6].kind, Kind::kCleared);
}

// Clear removes children before their parents.
TEST(BlockListenerTest, ClearRemovesDeepestFirst) {
  Recorder r;
  PrefixCache c(WithListener(&r));
  auto t = Iota(12, 100);
  InsertChain(c, kDomain, t, 3);
  c.Clear();
  ASSERT_EQ(r.events.size(), 7u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.events[3 + i].kind, Kind::kRemoved);
    EXPECT_EQ(r.events[3 + i].hash, r.events[2 - i].hash);
  }
}

// Announce: what RAM lacks of the given Blocks is withdrawn, then RAM's Blocks parent first.
TEST(BlockListenerTest, AnnounceWithdrawsWhatRamLacksThenStoresWhatItHolds) {
  Recorder r;
  PrefixCache c(WithListener(&r));
  auto t = Iota(8, 100);
  InsertChain(c, kDomain, t, 2);
  const std::vector<BlockEvent> stored = r.events;
  r.events.clear();
  const BlockRef held{kDomain, stored[1].hash, 2};
  const BlockRef lacking{kDomain, testing::TestDomain(9), 3};
  c.AnnounceBlocks(std::vector<BlockRef>{held, lacking});
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[0].kind, Kind::kRemoved);
  EXPECT_EQ(r.events[0].hash, lacking.hash);
  EXPECT_EQ(r.events[0].tier, Tier::kRam);
  EXPECT_EQ(r.events[1].hash, stored[0].hash);
  EXPECT_EQ(r.events[2].hash, stored[1].hash);
  EXPECT_EQ(r.events[2].tokens, stored[1].tokens);
}

TEST(BlockListenerTest, DomainFilterKeepsOtherDomainsOut) {
  Recorder r;
  DomainFilter only(r, kDomain);
  PrefixCache c(WithListener(&only));
  InsertChain(c, kTenant, Iota(4), 1);
  EXPECT_TRUE(r.events.empty()) << "a tenant's Block reached the stream";
  InsertChain(c, kDomain, Iota(4), 1);
  c.Clear();
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[1].kind, Kind::kRemoved);
  EXPECT_EQ(r.events[2].kind, Kind::kCleared);
  Recorder all;
  DomainFilter any(all, std::nullopt);
  PrefixCache c2(WithListener(&any));
  InsertChain(c2, kTenant, Iota(4), 1);
  EXPECT_EQ(all.events.size(), 1u);
}

}  // namespace
}  // namespace prefixd::cache
