#include "cache/prefix_cache.h"

#include <gtest/gtest.h>

#include "cache/cache_test_util.h"

namespace prefixd::cache {
namespace {

using testing::Iota;
using testing::MakePayload;
using Options = PrefixCache::Options;
using Match = PrefixCache::Match;

constexpr size_t kB = 4;
const Digest kDomain = testing::TestDomain(1);

std::span<const Token> First(const std::vector<Token>& t, size_t n) {
  return std::span<const Token>(t).first(n);
}

Options Attention(size_t budget = 1 << 20) { return Options{kB, budget, true, false}; }
Options Hybrid(size_t budget = 1 << 20) { return Options{kB, budget, true, true}; }
Options Recurrent(size_t budget = 1 << 20) { return Options{kB, budget, false, true}; }

// Inserts Blocks 0..n_blocks-1 of `t`, each with `bytes` of rows.
void InsertChain(PrefixCache& c, const std::vector<Token>& t, size_t n_blocks, size_t bytes = 10) {
  for (size_t k = 0; k < n_blocks; ++k) {
    ASSERT_FALSE(IsRefused(c.InsertBlock(kDomain, First(t, (k + 1) * kB), MakePayload(bytes, k))));
  }
}

TEST(PrefixCacheTest, EmptyCacheMisses) {
  PrefixCache c(Attention());
  auto t = Iota(12);
  Match m = c.Lookup(kDomain, t, 11);
  EXPECT_EQ(m.n_tokens, 0u);
  EXPECT_EQ(m.reason, MissReason::kNoEntry);
  Stats s = c.GetStats();
  EXPECT_EQ(s.lookups, 1u);
  EXPECT_EQ(s.misses[static_cast<size_t>(MissReason::kNoEntry)], 1u);
}

TEST(PrefixCacheTest, AttentionRestoresAnyPrefixInsideABlock) {
  PrefixCache c(Attention());
  auto t = Iota(12);
  InsertChain(c, t, 3);
  Match m = c.Lookup(kDomain, t, 11);
  EXPECT_EQ(m.n_tokens, 11u);
  EXPECT_EQ(m.reason, MissReason::kNone);
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[0].n_tokens, kB);
  EXPECT_EQ(m.rows[2].n_tokens, 3u);  // the engine slices 3 of the Block's 4 tokens
  EXPECT_EQ(testing::PayloadTag(m.rows[2].rows), 2u);
  EXPECT_EQ(m.n_blocks, 2u);
}

TEST(PrefixCacheTest, AttentionStopsWhereTheRequestDiverges) {
  PrefixCache c(Attention());
  auto t = Iota(12);
  InsertChain(c, t, 3);
  auto u = t;
  u[6] = 99;
  Match m = c.Lookup(kDomain, u, 11);
  EXPECT_EQ(m.n_tokens, 6u);
  EXPECT_EQ(m.diverged_at, 6u);
  EXPECT_EQ(m.reason, MissReason::kDiverged);
  ASSERT_EQ(m.rows.size(), 2u);
  EXPECT_EQ(m.rows[1].n_tokens, 2u);
}

TEST(PrefixCacheTest, DomainsNeverShare) {
  PrefixCache c(Attention());
  auto t = Iota(8);
  InsertChain(c, t, 2);
  EXPECT_EQ(c.Lookup(testing::TestDomain(2), t, 7).n_tokens, 0u);
}

TEST(PrefixCacheTest, AttentionTailHoldsThePartialBlock) {
  PrefixCache c(Attention());
  auto t = Iota(12);
  InsertChain(c, t, 2);
  EXPECT_EQ(c.InsertSnapshot(kDomain, First(t, 11), SnapshotKind::kTail, nullptr,
                             MakePayload(6, 77)),
            InsertOutcome::kInserted);
  Match m = c.Lookup(kDomain, t, 11);
  EXPECT_EQ(m.n_tokens, 11u);
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(testing::PayloadTag(m.rows[2].rows), 77u);
  EXPECT_EQ(m.rows[2].n_tokens, 3u);
  EXPECT_EQ(m.kind, SnapshotKind::kTail);
  EXPECT_EQ(c.Lookup(kDomain, t, 10).rows.back().n_tokens, 2u);  // a Tail can be sliced too
}

TEST(PrefixCacheTest, HybridNeedsASnapshotAtP) {
  PrefixCache c(Hybrid());
  auto t = Iota(16);
  InsertChain(c, t, 3);
  Match none = c.Lookup(kDomain, t, 15);
  EXPECT_EQ(none.n_tokens, 0u);
  EXPECT_EQ(none.reason, MissReason::kNoSnapshot);
  EXPECT_EQ(none.diverged_at, 12u);

  ASSERT_EQ(c.InsertSnapshot(kDomain, First(t, 8), SnapshotKind::kBlockBoundary,
                             MakePayload(20, 8), nullptr),
            InsertOutcome::kInserted);
  ASSERT_EQ(c.InsertSnapshot(kDomain, First(t, 10), SnapshotKind::kMessage, MakePayload(20, 10),
                             MakePayload(5, 110)),
            InsertOutcome::kInserted);
  Match m = c.Lookup(kDomain, t, 15);
  EXPECT_EQ(m.n_tokens, 10u);
  EXPECT_EQ(testing::PayloadTag(m.snapshot), 10u);
  EXPECT_EQ(m.kind, SnapshotKind::kMessage);
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[2].n_tokens, 2u);
  EXPECT_EQ(testing::PayloadTag(m.rows[2].rows), 110u);
  EXPECT_EQ(m.reason, MissReason::kNoSnapshot);

  auto u = t;
  u[9] = 99;  // the Tail no longer matches: back to the Block-end Snapshot at 8
  Match b = c.Lookup(kDomain, u, 15);
  EXPECT_EQ(b.n_tokens, 8u);
  EXPECT_EQ(testing::PayloadTag(b.snapshot), 8u);
  EXPECT_EQ(b.rows.size(), 2u);
}

TEST(PrefixCacheTest, RecurrentKeepsOnlyTheChainAndSnapshots) {
  PrefixCache c(Recurrent());
  auto t = Iota(16);
  ASSERT_EQ(c.InsertSnapshot(kDomain, First(t, 9), SnapshotKind::kTail, MakePayload(30, 9),
                             nullptr),
            InsertOutcome::kInserted);
  EXPECT_EQ(c.GetStats().blocks, 2u);  // placeholders hold the chain without memory
  EXPECT_EQ(c.GetStats().ram.rows, 0u);
  Match m = c.Lookup(kDomain, t, 15);
  EXPECT_EQ(m.n_tokens, 9u);
  EXPECT_TRUE(m.rows.empty());
  EXPECT_EQ(testing::PayloadTag(m.snapshot), 9u);
  auto u = t;
  u[2] = 99;  // the chain is verified even without rows
  EXPECT_EQ(c.Lookup(kDomain, u, 15).n_tokens, 0u);
  EXPECT_EQ(c.InsertBlock(kDomain, First(t, 12), nullptr), InsertOutcome::kInserted);
  EXPECT_EQ(c.GetStats().blocks, 3u);
  Status st = c.CheckConsistency();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

ChainHash WeakHash(const ChainHash& parent, std::span<const Token> tokens) {
  ChainHash h = parent;
  int64_t sum = 0;
  for (Token t : tokens) sum += t;
  h[0] ^= static_cast<uint8_t>(sum);
  h[1] ^= 0x5a;
  return h;
}

TEST(PrefixCacheTest, HashCollisionIsNeverServed) {
  Options o = Attention();
  o.chain_hash = &WeakHash;
  PrefixCache c(o);
  std::vector<Token> a = {1, 2, 3, 4}, b = {4, 3, 2, 1};  // same sum: same weak hash
  ASSERT_EQ(c.InsertBlock(kDomain, a, MakePayload(8, 1)), InsertOutcome::kInserted);
  EXPECT_EQ(c.InsertBlock(kDomain, b, MakePayload(8, 2)), InsertOutcome::kRefusedConflict);
  std::vector<Token> req = {4, 3, 2, 1, 5};
  Match m = c.Lookup(kDomain, req, 4);
  EXPECT_EQ(m.n_tokens, 0u);
  EXPECT_EQ(m.reason, MissReason::kVerificationFailed);
  EXPECT_EQ(c.GetStats().verification_failures, 2u);
  EXPECT_EQ(c.GetStats().misses[static_cast<size_t>(MissReason::kVerificationFailed)], 1u);
}

TEST(PrefixCacheTest, BudgetIsNeverExceededAndLruGoesFirst) {
  PrefixCache c(Attention(100));
  auto t = Iota(4), u = Iota(4, 100), v = Iota(4, 200);
  ASSERT_EQ(c.InsertBlock(kDomain, t, MakePayload(40)), InsertOutcome::kInserted);
  ASSERT_EQ(c.InsertBlock(kDomain, u, MakePayload(40)), InsertOutcome::kInserted);
  c.Lookup(kDomain, t, 4);  // t is now more recent than u
  ASSERT_EQ(c.InsertBlock(kDomain, v, MakePayload(40)), InsertOutcome::kInserted);
  Stats s = c.GetStats();
  EXPECT_LE(s.ram.total(), 100u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(c.Lookup(kDomain, t, 4).n_tokens, 4u);
  Match gone = c.Lookup(kDomain, u, 4);
  EXPECT_EQ(gone.n_tokens, 0u);
  EXPECT_EQ(gone.reason, MissReason::kEvicted);
}

TEST(PrefixCacheTest, TooLargeIsRefusedNotFatal) {
  PrefixCache c(Attention(100));
  auto t = Iota(4);
  EXPECT_EQ(c.InsertBlock(kDomain, t, MakePayload(101)), InsertOutcome::kRefusedTooLarge);
  Stats s = c.GetStats();
  EXPECT_EQ(s.refused_inserts, 1u);
  EXPECT_EQ(s.blocks, 0u);
  EXPECT_TRUE(c.CheckConsistency().ok());
}

TEST(PrefixCacheTest, PinnedEntriesAreNotEvicted) {
  PrefixCache c(Attention(100));
  auto t = Iota(8), u = Iota(4, 100);
  InsertChain(c, t, 2, 40);
  {
    Match pin = c.Lookup(kDomain, t, 8);
    ASSERT_EQ(pin.rows.size(), 2u);
    EXPECT_EQ(c.InsertBlock(kDomain, u, MakePayload(40)), InsertOutcome::kRefusedNoRoom);
    EXPECT_EQ(c.Trim(0), 80u);
    EXPECT_EQ(c.Lookup(kDomain, t, 8).rows[1].rows, pin.rows[1].rows);
  }
  EXPECT_EQ(c.InsertBlock(kDomain, u, MakePayload(40)), InsertOutcome::kInserted);
  EXPECT_EQ(c.Lookup(kDomain, t, 8).n_tokens, 4u);  // the deeper Block went first
  EXPECT_TRUE(c.CheckConsistency().ok());
}

TEST(PrefixCacheTest, DescendantsGoBeforeTheirBlock) {
  PrefixCache c(Hybrid(1000));
  auto t = Iota(12);
  InsertChain(c, t, 2);
  ASSERT_EQ(c.InsertSnapshot(kDomain, First(t, 6), SnapshotKind::kMessage, MakePayload(10),
                             MakePayload(5)),
            InsertOutcome::kInserted);
  c.Lookup(kDomain, t, 6);  // touch Block 0 (and the Tail), not Block 1
  EXPECT_EQ(c.Trim(25), 25u);  // Block 1 is least recent: it goes, the Tail stays
  Stats s = c.GetStats();
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_EQ(s.tails, 1u);
  EXPECT_EQ(c.Trim(10), 10u);  // the Tail goes before the Block it depends on
  EXPECT_EQ(c.GetStats().tails, 0u);
  EXPECT_EQ(c.Lookup(kDomain, t, 5).n_tokens, 0u);  // rows alone: no Snapshot to restore
  EXPECT_EQ(c.Trim(0), 0u);
  EXPECT_EQ(c.GetStats().blocks, 0u);  // empty nodes are gone, roots too
  EXPECT_TRUE(c.CheckConsistency().ok());
}

TEST(PrefixCacheTest, DuplicateSnapshotRaisesItsKind) {
  PrefixCache c(Recurrent());
  auto t = Iota(8);
  ASSERT_EQ(c.InsertSnapshot(kDomain, t, SnapshotKind::kBlockBoundary, MakePayload(5), nullptr),
            InsertOutcome::kInserted);
  EXPECT_EQ(c.InsertSnapshot(kDomain, t, SnapshotKind::kMessage, MakePayload(5), nullptr),
            InsertOutcome::kAlreadyPresent);
  auto longer = Iota(9);
  EXPECT_EQ(c.Lookup(kDomain, longer, 8).kind, SnapshotKind::kMessage);
  EXPECT_EQ(c.GetStats().ram.total(), 5u);
}

TEST(PrefixCacheTest, InvalidInsertsAreRefused) {
  PrefixCache c(Hybrid());
  auto t = Iota(8);
  EXPECT_EQ(c.InsertBlock(kDomain, First(t, 3), MakePayload(4)), InsertOutcome::kRefusedInvalid);
  EXPECT_EQ(c.InsertBlock(kDomain, First(t, 4), nullptr), InsertOutcome::kRefusedInvalid);
  EXPECT_EQ(c.InsertBlock(kDomain, t, MakePayload(4)), InsertOutcome::kRefusedNoParent);
  EXPECT_EQ(c.InsertSnapshot(kDomain, First(t, 4), SnapshotKind::kTail, nullptr, nullptr),
            InsertOutcome::kRefusedInvalid);  // a hybrid model needs the Snapshot
  EXPECT_EQ(c.InsertSnapshot(kDomain, First(t, 5), SnapshotKind::kTail, MakePayload(4), nullptr),
            InsertOutcome::kRefusedInvalid);  // and the Tail rows
  EXPECT_EQ(c.InsertSnapshot(kDomain, First(t, 5), SnapshotKind::kTail, MakePayload(4),
                             MakePayload(4)),
            InsertOutcome::kRefusedNoParent);
  EXPECT_EQ(c.GetStats().refused_inserts, 6u);
  EXPECT_EQ(c.GetStats().blocks, 0u);
  EXPECT_TRUE(c.CheckConsistency().ok());
}

TEST(PrefixCacheTest, InsertBlocksPublishesARunInOneCall) {
  PrefixCache c(Attention());
  auto t = Iota(16);
  std::vector<PayloadRef> rows = {MakePayload(4, 1), MakePayload(4, 2)};
  ASSERT_EQ(c.InsertBlocks(kDomain, t, 0, rows), InsertOutcome::kInserted);
  std::vector<PayloadRef> more = {MakePayload(4, 3), MakePayload(4, 4)};
  ASSERT_EQ(c.InsertBlocks(kDomain, t, 2, more), InsertOutcome::kInserted);
  EXPECT_EQ(c.InsertBlocks(kDomain, t, 1, std::span(more).first(1)),
            InsertOutcome::kAlreadyPresent);
  Match m = c.Lookup(kDomain, t, 16);
  EXPECT_EQ(m.n_tokens, 16u);
  EXPECT_EQ(testing::PayloadTag(m.rows[3].rows), 4u);
}

TEST(PrefixCacheTest, ClearDropsEverythingButPinnedPayloadsLive) {
  PrefixCache c(Attention());
  auto t = Iota(8);
  InsertChain(c, t, 2);
  Match pin = c.Lookup(kDomain, t, 8);
  c.Clear();
  EXPECT_EQ(c.GetStats().ram.total(), 0u);
  EXPECT_EQ(c.Lookup(kDomain, t, 8).n_tokens, 0u);
  EXPECT_EQ(pin.rows[1].rows->bytes.size(), 10u);
}

// A 100K-token prompt with a Snapshot at every Block end and a message Snapshot every 20
// Blocks, in a budget that holds the rows, the message Snapshots and ~40 boundary Snapshots.
TEST(PrefixCacheTest, RetentionFits100KTokensAndKeepsEveryMessagePoint) {
  constexpr size_t B = 256, kBlocks = 100000 / B, kSnap = 1000, kRows = 10;
  std::vector<size_t> messages;
  for (size_t k = 3; k < kBlocks; k += 20) messages.push_back(k * B + 100);
  size_t budget = kBlocks * kRows + messages.size() * (kSnap + kRows) + 40 * kSnap;
  PrefixCache c(Options{B, budget, true, true});
  auto t = Iota(kBlocks * B);
  auto prefix = [&](size_t n) { return std::span<const Token>(t).first(n); };
  size_t next_msg = 0;
  for (size_t k = 0; k < kBlocks; ++k) {
    ASSERT_EQ(c.InsertBlock(kDomain, prefix((k + 1) * B), MakePayload(kRows)),
              InsertOutcome::kInserted);
    if (next_msg < messages.size() && messages[next_msg] < (k + 1) * B) {
      ASSERT_EQ(c.InsertSnapshot(kDomain, prefix(messages[next_msg++]), SnapshotKind::kMessage,
                                 MakePayload(kSnap), MakePayload(kRows)),
                InsertOutcome::kInserted);
    }
    ASSERT_EQ(c.InsertSnapshot(kDomain, prefix((k + 1) * B), SnapshotKind::kBlockBoundary,
                               MakePayload(kSnap), nullptr),
              InsertOutcome::kInserted);
  }
  Stats s = c.GetStats();
  EXPECT_LE(s.ram.total(), budget);
  EXPECT_EQ(s.blocks, kBlocks);
  EXPECT_EQ(s.tails, messages.size());
  EXPECT_LE(s.snapshots, 40u);
  EXPECT_GT(s.thinned_snapshots, 300u);
  for (size_t p : messages) EXPECT_EQ(c.Lookup(kDomain, t, p + 1).n_tokens, p) << p;
  for (size_t k = kBlocks - 4; k <= kBlocks; ++k) {
    EXPECT_EQ(c.Lookup(kDomain, t, k * B).n_tokens, k * B);
  }
  EXPECT_TRUE(c.CheckConsistency().ok());
}

}  // namespace
}  // namespace prefixd::cache
