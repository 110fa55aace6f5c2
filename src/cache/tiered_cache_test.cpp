// The tier policy (TieredCache) with in-memory stores standing in for the disk and the shared
// tier: two "servers" (each its own RAM and disk) share one remote store.
#include "cache/tiered_cache.h"

#include <gtest/gtest.h>

#include <map>

#include "cache/cache_test_util.h"

namespace prefixd::cache {
namespace {

using store::Record;
using store::RecordId;
using store::RecordKind;
using testing::Iota;
using testing::MakePayload;
using testing::TestDomain;

// A RecordStore in memory that writes at once and counts what it is asked.
class MemoryStore : public store::RecordStore {
 public:
  bool PutAsync(store::RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> p) override {
    meta.payload_bytes = p->size();
    records[store::IdOf(meta)] = Record{std::move(meta), *p};
    return true;
  }
  Result<Record> Read(const Digest& key, RecordKind kind) override {
    reads++;
    auto it = records.find({key, kind});
    if (it == records.end() || vanish_on_read) return Status::NotFound("no record");
    return it->second;
  }
  bool Contains(const Digest& key, RecordKind kind) override {
    contains++;
    return records.count({key, kind}) > 0;
  }
  Result<store::OpenedRecord> OpenRecord(const Digest& key, RecordKind kind) override {
    opens++;
    return store::RecordStore::OpenRecord(key, kind);  // whole records only: read instead
  }
  Status Remove(const Digest& key, RecordKind kind) override {
    removes++;
    return records.erase({key, kind}) ? Status::OK() : Status::NotFound("no record");
  }

  std::map<RecordId, Record> records;
  bool vanish_on_read = false;  // evicted between the walk and the read
  int reads = 0, contains = 0, removes = 0, opens = 0;
};

constexpr size_t kB = 4;

PrefixCache::Options Opts() {
  PrefixCache::Options o;
  o.block_size = kB;
  o.ram_budget_bytes = 1 << 20;
  return o;  // pure attention: any prefix of stored rows restores
}

// One server: its own RAM and disk, the shared remote store.
struct Server {
  PrefixCache ram{Opts()};
  MemoryStore disk;
  TieredCache tiers;
  explicit Server(MemoryStore& remote) : tiers(ram, {&disk, &remote}) {}
  Server() : tiers(ram, {&disk, nullptr}) {}  // no shared tier

  // Publishes the Blocks and the Tail of `tokens` as the engine does after a prefill.
  void Publish(const Digest& d, const std::vector<Token>& tokens) {
    std::vector<PayloadRef> rows;
    for (size_t k = 0; (k + 1) * kB <= tokens.size(); ++k) rows.push_back(MakePayload(16, k + 1));
    tiers.InsertBlocks(d, tokens, 0, rows);
    if (tokens.size() % kB != 0) {
      tiers.InsertSnapshot(d, tokens, SnapshotKind::kGenerationEnd, nullptr, MakePayload(8, 99));
    }
  }
};

TEST(TieredCache, InsertsSpillToDiskAndTheSharedTierUnderTheSameKeys) {
  MemoryStore remote;
  Server a(remote);
  a.Publish(TestDomain(1), Iota(10));
  EXPECT_EQ(a.disk.records.size(), 3u);  // 2 Blocks + 1 Tail
  ASSERT_EQ(remote.records.size(), 3u);
  for (const auto& [id, rec] : a.disk.records) EXPECT_EQ(remote.records.at(id).payload, rec.payload);
}

TEST(TieredCache, AnotherServerPromotesFromTheSharedTierIntoRamAndDisk) {
  MemoryStore remote;
  Server a(remote), b(remote);
  const Digest d = TestDomain(1);
  a.Publish(d, Iota(10));
  const std::vector<Token> prompt = Iota(14);  // the next turn: the published prompt and more
  // The scheduler thread's lookup stays local: nothing in b's RAM or disk, the network untouched.
  const int reads = remote.reads, contains = remote.contains;
  auto local = b.tiers.Lookup(d, prompt, 13, 0, Reach::kLocal);
  EXPECT_EQ(local.match.n_tokens, 0u);
  EXPECT_EQ(remote.reads, reads);
  EXPECT_EQ(remote.contains, contains);
  // The request's own thread promotes: the shared tier offers the prefix.
  TieredCache::Promoted p = b.tiers.Promote(d, prompt, 13);
  EXPECT_EQ(p.ram, 0u);
  EXPECT_EQ(p.disk, 0u);
  EXPECT_EQ(p.remote, 10u);  // the Blocks and the Tail at 10
  auto hit = b.tiers.Lookup(d, prompt, 13, 0, Reach::kLocal);
  EXPECT_EQ(hit.match.n_tokens, 10u);
  EXPECT_EQ(hit.tier, Tier::kRam);
  EXPECT_EQ(b.disk.records.size(), 3u) << "what the shared tier gave is kept on disk too";
}

// A request's disk prefix is opened for its restore only when longer than RAM's: opening the
// same prefix would read its Snapshot (megabytes) to drop it.
TEST(TieredCache, TheDiskIsNotOpenedForAPrefixRamRestoresAsFar) {
  Server a;
  const Digest d = TestDomain(1);
  a.Publish(d, Iota(10));
  TieredCache::Promoted p = a.tiers.Promote(d, Iota(14), 13, /*open_disk=*/true);
  EXPECT_EQ(p.ram, 10u);
  EXPECT_EQ(p.opened, nullptr);
  EXPECT_EQ(a.disk.opens, 0);
  EXPECT_EQ(a.disk.reads, 0);
  // Without the prefix in RAM the disk's is opened (this store cannot: it is promoted instead).
  a.ram.Clear();
  p = a.tiers.Promote(d, Iota(14), 13, /*open_disk=*/true);
  EXPECT_GT(a.disk.opens, 0);
  EXPECT_EQ(p.disk, 10u);
}

TEST(TieredCache, LookupWithReachAllGoesRamDiskRemoteInOrder) {
  MemoryStore remote;
  Server a(remote), b(remote);
  const Digest d = TestDomain(1);
  a.Publish(d, Iota(10));
  for (const auto& [id, rec] : a.disk.records) {  // b's disk holds Block 0 only
    if (rec.meta.position == kB) {
      b.disk.PutAsync(rec.meta, std::make_shared<std::vector<uint8_t>>(rec.payload));
    }
  }
  ASSERT_EQ(b.disk.records.size(), 1u);
  auto f = b.tiers.Lookup(d, Iota(14), 13, 0, Reach::kAll);
  EXPECT_EQ(f.match.n_tokens, 10u);
  EXPECT_EQ(f.tier, Tier::kRemote);
  auto again = b.tiers.Lookup(d, Iota(14), 13, 0, Reach::kAll);
  EXPECT_EQ(again.match.n_tokens, 10u);
  EXPECT_EQ(again.tier, Tier::kRam);
}

TEST(TieredCache, ARecordGoneBetweenWalkAndReadIsACleanMiss) {
  MemoryStore remote;
  Server a(remote), b(remote);
  const Digest d = TestDomain(1);
  a.Publish(d, Iota(10));
  remote.vanish_on_read = true;
  EXPECT_EQ(b.tiers.Promote(d, Iota(14), 13).remote, 0u);
  EXPECT_EQ(b.tiers.Lookup(d, Iota(14), 13, 0, Reach::kLocal).match.n_tokens, 0u);
  EXPECT_TRUE(b.ram.CheckConsistency().ok());
}

TEST(TieredCache, AStoredRecordWithOtherTokensIsDroppedNeverServed) {
  MemoryStore remote;
  Server a(remote), b(remote);
  const Digest d = TestDomain(1);
  a.Publish(d, Iota(10));
  for (auto& [id, rec] : remote.records) {
    if (id.kind == RecordKind::kBlockRows) rec.meta.tokens[0] += 1000;  // a hash "collision"
  }
  EXPECT_EQ(b.tiers.Promote(d, Iota(14), 13).remote, 0u);
  EXPECT_GE(remote.removes, 1);
  EXPECT_EQ(b.tiers.Lookup(d, Iota(14), 13, 0, Reach::kLocal).match.n_tokens, 0u);
}

TEST(TieredCache, AnotherDomainNeverHits) {
  MemoryStore remote;
  Server a(remote), b(remote);
  a.Publish(TestDomain(1), Iota(10));
  EXPECT_EQ(b.tiers.Promote(TestDomain(2), Iota(14), 13).remote, 0u);
  EXPECT_EQ(b.tiers.Promote(TestDomain(1), Iota(14), 13).remote, 10u);
}

}  // namespace
}  // namespace prefixd::cache
