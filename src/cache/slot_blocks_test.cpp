// SlotBlocks: what the slots' sequences hold, as Tier::kSlot BlockEvents counted across slots.
#include "cache/slot_blocks.h"

#include <gtest/gtest.h>

#include "cache/block_reporter.h"
#include "cache/cache_test_util.h"
#include "cache/chain_hash.h"
#include "cache/prefix_cache.h"

namespace prefixd::cache {
namespace {

using Kind = BlockEvent::Kind;
using testing::Iota;
using testing::MakePayload;

const Digest kDomain = testing::TestDomain(1);
const Digest kTenant = testing::TestDomain(2);
constexpr size_t kB = 4;

struct Recorder : BlockListener {
  void OnBlockEvent(BlockEvent e) override { events.push_back(std::move(e)); }
  // The events' kinds and depths, e.g. {{kStored, 1}, {kStored, 2}}.
  std::vector<std::pair<Kind, size_t>> Steps() const {
    std::vector<std::pair<Kind, size_t>> out;
    for (const BlockEvent& e : events) out.emplace_back(e.kind, e.depth);
    return out;
  }
  std::vector<BlockEvent> events;
};

std::vector<Token> Concat(std::vector<Token> a, const std::vector<Token>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Full Blocks only, parents first, each with its tokens, chain and tier; the hashes are the
// ones the RAM tier gives the same tokens, so a prefix has one name in every medium.
TEST(SlotBlocksTest, HoldStoresFullBlocksParentsFirstWithRamsHashes) {
  Recorder r;
  SlotBlocks slots(r, kB);
  auto t = Iota(10, 100);  // two Blocks and a partial one
  slots.Hold(0, kDomain, t);
  ASSERT_EQ(r.events.size(), 2u);
  const std::vector<ChainHash> chain = ChainHashes(kDomain, t, kB);
  for (size_t k = 0; k < 2; ++k) {
    const BlockEvent& e = r.events[k];
    EXPECT_EQ(e.kind, Kind::kStored);
    EXPECT_EQ(e.tier, Tier::kSlot);
    EXPECT_EQ(e.domain, kDomain);
    EXPECT_EQ(e.depth, k + 1);
    EXPECT_EQ(e.hash, chain[k]);
    EXPECT_EQ(e.parent, k == 0 ? kDomain : chain[0]);
    EXPECT_EQ(e.tokens, std::vector<Token>(t.begin() + kB * k, t.begin() + kB * (k + 1)));
  }
  Recorder ram_events;
  PrefixCache ram([&] {
    PrefixCache::Options o;
    o.block_size = kB;
    o.ram_budget_bytes = 1000;
    o.listener = &ram_events;
    return o;
  }());
  std::vector<PayloadRef> rows{MakePayload(10, 1), MakePayload(10, 2)};
  ASSERT_EQ(ram.InsertBlocks(kDomain, std::span(t).first(2 * kB), 0, rows),
            InsertOutcome::kInserted);
  ASSERT_EQ(ram_events.events.size(), 2u);
  EXPECT_EQ(ram_events.events[1].hash, r.events[1].hash);
  EXPECT_EQ(ram_events.events[1].parent, r.events[1].parent);
}

// Growing reports only the new Blocks; holding the same again reports nothing.
TEST(SlotBlocksTest, ExtendingStoresOnlyTheNewBlocks) {
  Recorder r;
  SlotBlocks slots(r, kB);
  auto t = Iota(12, 7);
  slots.Hold(0, kDomain, std::span(t).first(6));
  slots.Hold(0, kDomain, t);
  slots.Hold(0, kDomain, t);
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{
                           {Kind::kStored, 1}, {Kind::kStored, 2}, {Kind::kStored, 3}}));
  EXPECT_EQ(r.events[1].parent, r.events[0].hash);
  EXPECT_EQ(slots.n_blocks(), 3u);
}

// A truncation (a restore that keeps part of the slot, another turn's edit) removes the Blocks
// past the kept prefix, children first, then stores the new ones.
TEST(SlotBlocksTest, TruncationRemovesChildrenFirstThenStores) {
  Recorder r;
  SlotBlocks slots(r, kB);
  auto a = Iota(12, 0);
  auto b = Concat(Iota(4, 0), Iota(8, 500));  // shares a's first Block
  slots.Hold(0, kDomain, a);
  r.events.clear();
  slots.Hold(0, kDomain, std::span(a).first(5));
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{{Kind::kRemoved, 3},
                                                            {Kind::kRemoved, 2}}));
  EXPECT_TRUE(r.events[0].tokens.empty());
  EXPECT_EQ(r.events[0].tier, Tier::kSlot);
  r.events.clear();
  slots.Hold(0, kDomain, b);
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{{Kind::kStored, 2},
                                                            {Kind::kStored, 3}}));
  EXPECT_EQ(r.events[0].parent, ChainHashes(kDomain, a, kB)[0]);
}

// A Block two slots hold is stored once and removed when the last of them drops it.
TEST(SlotBlocksTest, SharedBlocksAreCountedAcrossSlots) {
  Recorder r;
  SlotBlocks slots(r, kB);
  auto a = Concat(Iota(8, 0), Iota(4, 300));
  auto b = Concat(Iota(8, 0), Iota(4, 400));
  slots.Hold(0, kDomain, a);
  slots.Hold(1, kDomain, b);
  ASSERT_EQ(r.events.size(), 4u) << "b's first two Blocks were held by slot 0";
  EXPECT_EQ(r.events[3].depth, 3u);
  r.events.clear();
  slots.Hold(0, kDomain, {});  // slot 0 forgets: only its own leaf goes
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{{Kind::kRemoved, 3}}));
  EXPECT_EQ(r.events[0].hash, ChainHashes(kDomain, a, kB)[2]);
  r.events.clear();
  slots.Hold(1, kDomain, Iota(8, 900));  // slot 1 is reused for another conversation
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{{Kind::kRemoved, 3},
                                                            {Kind::kRemoved, 2},
                                                            {Kind::kRemoved, 1},
                                                            {Kind::kStored, 1},
                                                            {Kind::kStored, 2}}));
  EXPECT_EQ(slots.n_blocks(), 2u);
}

// The same tokens in another domain are other Blocks.
TEST(SlotBlocksTest, AnotherDomainIsOtherBlocks) {
  Recorder r;
  SlotBlocks slots(r, kB);
  auto t = Iota(8, 0);
  slots.Hold(0, kDomain, t);
  r.events.clear();
  slots.Hold(0, kTenant, t);
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.events[0].kind, Kind::kRemoved);
  EXPECT_EQ(r.events[0].domain, kDomain);
  EXPECT_EQ(r.events[2].kind, Kind::kStored);
  EXPECT_EQ(r.events[2].domain, kTenant);
  EXPECT_EQ(r.events[2].parent, kTenant);
}

// DropAll (a clear) removes every held Block, children before parents across slots; the slots
// report again afterwards. Close (the server stops) ignores later Holds.
TEST(SlotBlocksTest, DropAllAndClose) {
  Recorder r;
  SlotBlocks slots(r, kB);
  slots.Hold(0, kDomain, Concat(Iota(8, 0), Iota(4, 300)));
  slots.Hold(2, kDomain, Concat(Iota(8, 0), Iota(4, 400)));
  r.events.clear();
  slots.DropAll();
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{{Kind::kRemoved, 3},
                                                            {Kind::kRemoved, 3},
                                                            {Kind::kRemoved, 2},
                                                            {Kind::kRemoved, 1}}));
  EXPECT_EQ(slots.n_blocks(), 0u);
  slots.Hold(2, kDomain, Iota(4, 0));  // a slot that holds the same again is not left out
  EXPECT_EQ(r.events.size(), 5u);
  EXPECT_EQ(r.events.back().kind, Kind::kStored);
  slots.Close();
  EXPECT_EQ(r.events.size(), 6u);
  EXPECT_EQ(r.events.back().kind, Kind::kRemoved);
  slots.Hold(1, kDomain, Iota(8, 0));
  EXPECT_EQ(r.events.size(), 6u);
  EXPECT_EQ(slots.n_blocks(), 0u);
}

// The resend names every held Block once, parents first.
TEST(SlotBlocksTest, AnnounceStoresEachHeldBlockOnce) {
  Recorder r;
  SlotBlocks slots(r, kB);
  slots.Hold(0, kDomain, Concat(Iota(8, 0), Iota(4, 300)));
  slots.Hold(1, kDomain, Concat(Iota(8, 0), Iota(4, 400)));
  r.events.clear();
  slots.Announce();
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{{Kind::kStored, 1},
                                                            {Kind::kStored, 2},
                                                            {Kind::kStored, 3},
                                                            {Kind::kStored, 3}}));
  EXPECT_EQ(r.events[3].tokens, Iota(4, 400));
}

// Through BlockReporter: the tenant rule applies to the slots' Blocks, the resend includes
// them and Stop withdraws them.
TEST(SlotBlocksTest, ReporterFiltersAnnouncesAndWithdraws) {
  Recorder r;
  BlockReporter reporter(r, kDomain, kB);
  PrefixCache ram([&] {
    PrefixCache::Options o;
    o.block_size = kB;
    o.ram_budget_bytes = 1000;
    o.listener = reporter.ram_listener();
    return o;
  }());
  reporter.Start(ram, nullptr);
  reporter.slots().Hold(0, kTenant, Iota(8, 0));
  EXPECT_TRUE(r.events.empty()) << "a tenant's Blocks stay unsaid";
  reporter.slots().Hold(1, kDomain, Iota(8, 0));
  ASSERT_EQ(r.events.size(), 2u);
  r.events.clear();
  reporter.AnnounceBlocks();
  ASSERT_EQ(r.events.size(), 2u);
  for (const BlockEvent& e : r.events) {
    EXPECT_EQ(e.kind, Kind::kStored);
    EXPECT_EQ(e.tier, Tier::kSlot);
    EXPECT_EQ(e.domain, kDomain);
  }
  r.events.clear();
  reporter.Stop();
  EXPECT_EQ(r.Steps(), (std::vector<std::pair<Kind, size_t>>{{Kind::kRemoved, 2},
                                                            {Kind::kRemoved, 1}}));
  reporter.slots().Hold(1, kDomain, Iota(12, 0));
  EXPECT_EQ(r.events.size(), 2u) << "nothing after the stop";
}

}  // namespace
}  // namespace prefixd::cache
