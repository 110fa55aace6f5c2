// The disk tier's Blocks as BlockEvents (StoreBlockEvents) and BlockReporter's announcement:
// what a KV-event subscriber that joins late is told.
#include "cache/block_reporter.h"

#include <gtest/gtest.h>

#include "cache/cache_test_util.h"
#include "store/store_test_util.h"
#include "util/fault_env.h"

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
  void Attach(BlockSource* s) override { source = s; }
  std::vector<BlockEvent> events;
  BlockSource* source = nullptr;
};

// The record of Block k of `tokens` in `domain`, as StoreTier writes it.
store::RecordMeta BlockRecord(const Digest& domain, std::span<const Token> tokens, size_t k) {
  std::vector<ChainHash> chain = ChainHashes(domain, tokens.first((k + 1) * kB), kB);
  store::RecordMeta m;
  m.key = chain[k];
  m.parent = k == 0 ? domain : chain[k - 1];
  m.domain = domain;
  m.position = uint32_t((k + 1) * kB);
  m.tokens.assign(tokens.begin() + k * kB, tokens.begin() + (k + 1) * kB);
  return m;
}

TEST(StoreBlockEvents, ABlockRecordIsABlockOfItsTier) {
  auto t = Iota(8, 10);
  auto e = BlockEventOf(BlockRecord(kDomain, t, 1), Kind::kStored, Tier::kDisk, kB);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->tier, Tier::kDisk);
  EXPECT_EQ(e->depth, 2u);
  EXPECT_EQ(e->parent, BlockRecord(kDomain, t, 0).key);
  EXPECT_EQ(e->tokens, std::vector<Token>(t.begin() + 4, t.end()));
  EXPECT_TRUE(BlockEventOf(BlockRecord(kDomain, t, 1), Kind::kRemoved, Tier::kDisk, kB)->tokens.empty());
  store::RecordMeta snap = BlockRecord(kDomain, t, 1);
  snap.kind = store::RecordKind::kSnapshot;
  EXPECT_FALSE(BlockEventOf(snap, Kind::kStored, Tier::kDisk, kB));
  store::RecordMeta sealed = BlockRecord(kDomain, t, 1);
  sealed.sealed = true;
  sealed.tokens.clear();
  EXPECT_FALSE(BlockEventOf(sealed, Kind::kStored, Tier::kDisk, kB)) << "sealed tokens are secret";
}

class BlockReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::testing::OpenStore(dir_.path(), &env_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    disk_ = std::move(*s);
  }
  PrefixCache::Options RamOptions(BlockListener* l) {
    PrefixCache::Options o;
    o.block_size = kB;
    o.ram_budget_bytes = 1000;
    o.listener = l;
    return o;
  }
  void PutOnDisk(const Digest& domain, std::span<const Token> t, size_t n) {
    for (size_t k = 0; k < n; ++k) {
      ASSERT_TRUE(disk_->PutAsync(BlockRecord(domain, t, k),
                                  std::make_shared<const std::vector<uint8_t>>(10, 1)));
    }
    disk_->Flush();
  }

  store::testing::TempDir dir_;
  FaultEnv env_;
  std::unique_ptr<store::DiskStore> disk_;
};

// At start RAM is empty: each Block on disk is reported on disk, parents first, and withdrawn
// from RAM (an earlier process may have reported it there); another domain's stay unsaid.
TEST_F(BlockReporterTest, StartReportsTheDiskAndWithdrawsItFromRam) {
  auto t = Iota(8, 100);
  PutOnDisk(kDomain, t, 2);
  PutOnDisk(kTenant, t, 1);
  Recorder r;
  BlockReporter reporter(r, kDomain, kB);
  PrefixCache ram(RamOptions(reporter.ram_listener()));
  reporter.Start(ram, disk_.get());
  EXPECT_EQ(r.source, &reporter);
  ASSERT_EQ(r.events.size(), 4u);
  for (size_t i : {0, 1}) {
    EXPECT_EQ(r.events[i].kind, Kind::kStored);
    EXPECT_EQ(r.events[i].tier, Tier::kDisk);
    EXPECT_EQ(r.events[i].depth, i + 1) << "parent first";
    EXPECT_EQ(r.events[i].domain, kDomain);
    EXPECT_EQ(r.events[i].tokens, std::vector<Token>(t.begin() + kB * i, t.begin() + kB * (i + 1)));
  }
  for (size_t i : {2, 3}) {
    EXPECT_EQ(r.events[i].kind, Kind::kRemoved);
    EXPECT_EQ(r.events[i].tier, Tier::kRam);
  }
  reporter.Stop();
  EXPECT_EQ(r.source, nullptr);
}

// A resend reports the disk's Blocks and RAM's, and withdraws from RAM only what it lacks;
// later disk changes are reported as they happen; Stop reports RAM's Blocks removed.
TEST_F(BlockReporterTest, AnnounceReportsBothTiersAndTheDiskKeepsReporting) {
  auto t = Iota(8, 100);
  PutOnDisk(kDomain, t, 2);
  Recorder r;
  BlockReporter reporter(r, std::nullopt, kB);
  PrefixCache ram(RamOptions(reporter.ram_listener()));
  reporter.Start(ram, disk_.get());
  std::vector<PayloadRef> rows{MakePayload(10, 1)};
  ASSERT_EQ(ram.InsertBlocks(kDomain, std::span(t).first(kB), 0, rows), InsertOutcome::kInserted);
  r.events.clear();
  reporter.AnnounceBlocks();
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.events[0].tier, Tier::kDisk);
  EXPECT_EQ(r.events[1].tier, Tier::kDisk);
  EXPECT_EQ(r.events[2].kind, Kind::kRemoved);  // Block 1: on disk, not in RAM
  EXPECT_EQ(r.events[2].depth, 2u);
  EXPECT_EQ(r.events[3].kind, Kind::kStored);   // Block 0 in RAM
  EXPECT_EQ(r.events[3].tier, Tier::kRam);
  r.events.clear();
  ASSERT_TRUE(disk_->Clear(std::nullopt).ok());
  ASSERT_EQ(r.events.size(), 2u);
  for (const BlockEvent& e : r.events) {
    EXPECT_EQ(e.kind, Kind::kRemoved);
    EXPECT_EQ(e.tier, Tier::kDisk);
  }
  r.events.clear();
  reporter.Stop();
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].kind, Kind::kRemoved);
  EXPECT_EQ(r.events[0].tier, Tier::kRam);
}

}  // namespace
}  // namespace prefixd::cache
