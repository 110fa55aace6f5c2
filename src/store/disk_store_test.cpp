#include "store/disk_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "store/store_test_util.h"
#include "util/fault_env.h"
#include "util/process_memory.h"

namespace prefixd::store {
namespace {

using testing::DomainOf;
using testing::ExpectAllIntact;
using testing::MetaFor;
using testing::PayloadFor;
using testing::PayloadPtr;
using testing::TempDir;

// Tracks syncs instead of doing them: real fsyncs cost ~15 ms each on the test machines.
// RoundTrip and EmptyPayloadAndNoTokens use the real POSIX Env.
Env* FastEnv() {
  static FaultEnv* env = new FaultEnv();
  return env;
}

// The apparent size of every regular file under `dir` (records, index log, LOCK, temp files).
uint64_t FileBytesUnder(const std::string& dir) {
  uint64_t n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

std::unique_ptr<DiskStore> OpenOrDie(const std::string& dir, uint64_t quota = 1 << 30,
                                     Env* env = FastEnv(), size_t depth = 64) {
  DiskStore::Options o;
  o.dir = dir;
  o.quota_bytes = quota;
  o.env = env;
  o.writer_queue_depth = depth;
  auto s = DiskStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(DiskStore, RoundTrip) {
  TempDir dir;
  auto store = OpenOrDie(dir.path(), 1 << 30, Env::Default());
  RecordMeta meta = MetaFor(7);
  ASSERT_TRUE(store->PutAsync(meta, PayloadPtr(7, 1000)));
  store->Flush();
  auto payload = store->Get(meta.key, RecordKind::kBlockRows);
  ASSERT_TRUE(payload.ok()) << payload.status().ToString();
  EXPECT_EQ(*payload, PayloadFor(7, 1000));
  auto rec = store->Read(meta.key, RecordKind::kBlockRows);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->meta.tokens, meta.tokens);
  EXPECT_EQ(rec->meta.parent, meta.parent);
  EXPECT_EQ(rec->meta.domain, meta.domain);
  EXPECT_EQ(rec->meta.position, 7u);
  EXPECT_EQ(rec->meta.payload_bytes, 1000u);
  EXPECT_TRUE(store->Get(meta.key, RecordKind::kSnapshot).status().IsNotFound());
  Stats st = store->GetStats();
  EXPECT_EQ(st.records, 1u);
  EXPECT_EQ(st.puts_written, 1u);
  EXPECT_EQ(st.gets, 3u);
  EXPECT_EQ(st.get_hits, 2u);
  EXPECT_EQ(st.get_not_found, 1u);
  EXPECT_EQ(st.bytes, RecordFileBytes(rec->meta));
}

// OpenRecord verifies the front and leaves the payload in the file: the reader reads it
// where it wants and PayloadMatches says whether what it read is the record's; a damaged
// payload is reported back and quarantined. A damaged front fails OpenRecord itself.
TEST(DiskStore, OpenLeavesThePayloadInTheFileForTheReaderToCheck) {
  TempDir dir;
  auto store = OpenOrDie(dir.path(), 1 << 30, Env::Default());
  RecordMeta meta = MetaFor(7);
  ASSERT_TRUE(store->PutAsync(meta, PayloadPtr(7, 100000)));
  store->Flush();
  auto rec = store->OpenRecord(meta.key, RecordKind::kBlockRows);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->meta.tokens, meta.tokens);
  ASSERT_EQ(rec->meta.payload_bytes, 100000u);
  std::vector<uint8_t> bytes(100000);
  ASSERT_EQ(*rec->file->Read(rec->payload_offset, bytes.size(), bytes.data()), bytes.size());
  EXPECT_EQ(bytes, PayloadFor(7, 100000));
  // The check joins pieces taken in any order.
  const uint32_t a = Crc32c(bytes.data(), 40000), b = Crc32c(bytes.data() + 40000, 60000);
  EXPECT_TRUE(PayloadMatches(*rec, Crc32cCombine(a, b, 60000)));
  EXPECT_FALSE(PayloadMatches(*rec, Crc32cCombine(b, a, 40000)));
  bytes[50000] ^= 1;
  EXPECT_FALSE(PayloadMatches(*rec, Crc32c(bytes.data(), bytes.size())));
  store->ReportCorrupt(meta.key, RecordKind::kBlockRows);
  EXPECT_FALSE(store->Contains(meta.key, RecordKind::kBlockRows));
  EXPECT_EQ(store->GetStats().quarantined, 1u);

  RecordMeta other = MetaFor(8);
  ASSERT_TRUE(store->PutAsync(other, PayloadPtr(8, 1000)));
  store->Flush();
  const std::string path = dir.path() + "/records/" + RecordFileName(IdOf(other)).substr(0, 2) +
                           "/" + RecordFileName(IdOf(other));
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);  // inside the header body
    f.put(char(0x7f));
  }
  EXPECT_TRUE(store->OpenRecord(other.key, RecordKind::kBlockRows).status().IsCorruption());
  EXPECT_FALSE(store->Contains(other.key, RecordKind::kBlockRows));
}

// Write-behind yields to inference: while the foreground is busy a put waits; it is
// written once the foreground is idle, or at once when Flush() waits for it.
TEST(DiskStore, ForegroundBusyDefersWrites) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  store->SetForegroundBusy(true);
  RecordMeta a = MetaFor(3), b = MetaFor(4);
  ASSERT_TRUE(store->PutAsync(a, PayloadPtr(3, 100)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(store->Contains(a.key, RecordKind::kBlockRows)) << "written while busy";
  EXPECT_EQ(store->GetStats().queue_depth, 1u);
  store->SetForegroundBusy(false);
  for (int i = 0; i < 200 && !store->Contains(a.key, RecordKind::kBlockRows); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(store->Contains(a.key, RecordKind::kBlockRows)) << "not written once idle";
  store->SetForegroundBusy(true);
  ASSERT_TRUE(store->PutAsync(b, PayloadPtr(4, 100)));
  store->Flush();  // a flush does not wait for the foreground
  EXPECT_TRUE(store->Contains(b.key, RecordKind::kBlockRows));
}

// Large Snapshots are written around the page cache (O_DIRECT where the file system allows
// it), rows through it. Whatever their lengths fall on (the direct writes' blocks, the staging
// buffer), every record reads back whole, verifies, and is found again after a reopen.
TEST(DiskStore, LargeRecordsRoundTripThroughEitherWritePath) {
  TempDir dir;
  struct Written {
    RecordMeta meta;
    size_t size;
  };
  std::vector<Written> written;
  {
    auto store = OpenOrDie(dir.path(), 1 << 30, Env::Default());
    uint32_t seed = 10;
    for (size_t n : {(size_t(1) << 20) - 1, size_t(1) << 20, (size_t(1) << 20) + 1,
                     (size_t(3) << 20) + 4093}) {
      for (RecordKind kind : {RecordKind::kSnapshot, RecordKind::kBlockRows}) {
        RecordMeta m = MetaFor(seed, 0, kind, kind == RecordKind::kSnapshot ? 0 : 16);
        ASSERT_TRUE(store->PutAsync(m, PayloadPtr(seed, n)));
        written.push_back({m, n});
        ++seed;
      }
    }
    store->Flush();
  }
  auto store = OpenOrDie(dir.path(), 1 << 30, Env::Default());
  for (const Written& w : written) {
    auto rec = store->Read(w.meta.key, w.meta.kind);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    EXPECT_TRUE(rec->payload == PayloadFor(w.meta.position, w.size)) << w.size << " bytes";
  }
  const VerifyReport report = store->Verify();
  EXPECT_EQ(report.checked, written.size());
  EXPECT_EQ(report.bad, 0u);
}

TEST(DiskStore, EmptyPayloadAndNoTokens) {
  TempDir dir;
  auto store = OpenOrDie(dir.path(), 1 << 30, Env::Default());
  RecordMeta meta = MetaFor(1, 0, RecordKind::kTail, 0);
  ASSERT_TRUE(store->PutAsync(meta, PayloadPtr(1, 0)));
  store->Flush();
  auto rec = store->Read(meta.key, RecordKind::kTail);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_TRUE(rec->payload.empty());
  EXPECT_TRUE(rec->meta.tokens.empty());
}

TEST(DiskStore, SameKeyDifferentKindsAreDifferentRecords) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  RecordMeta rows = MetaFor(3, 0, RecordKind::kBlockRows);
  RecordMeta snap = MetaFor(3, 0, RecordKind::kSnapshot);
  ASSERT_EQ(rows.key, snap.key);
  ASSERT_TRUE(store->PutAsync(rows, PayloadPtr(3, 100)));
  ASSERT_TRUE(store->PutAsync(snap, std::make_shared<std::vector<uint8_t>>(50, 0xab)));
  store->Flush();
  EXPECT_EQ(store->Get(rows.key, RecordKind::kBlockRows)->size(), 100u);
  EXPECT_EQ(*store->Get(snap.key, RecordKind::kSnapshot), std::vector<uint8_t>(50, 0xab));
  EXPECT_EQ(store->List().size(), 2u);
}

TEST(DiskStore, WriteBehindAndFlush) {
  TempDir dir;
  auto store = OpenOrDie(dir.path(), 1 << 30, FastEnv(), 256);
  for (uint32_t i = 0; i < 100; ++i) ASSERT_TRUE(store->PutAsync(MetaFor(i), PayloadPtr(i, 300)));
  store->Flush();
  Stats st = store->GetStats();
  EXPECT_EQ(st.records, 100u);
  EXPECT_EQ(st.puts_written, 100u);
  EXPECT_EQ(st.queue_depth, 0u);
  EXPECT_EQ(ExpectAllIntact(*store), 100u);
}

TEST(DiskStore, DuplicatePutIsNotWrittenTwice) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(store->PutAsync(MetaFor(1), PayloadPtr(1, 10)));
  ASSERT_TRUE(store->PutAsync(MetaFor(1), PayloadPtr(1, 10)));
  store->Flush();
  ASSERT_TRUE(store->PutAsync(MetaFor(1), PayloadPtr(1, 10)));
  store->Flush();
  Stats st = store->GetStats();
  EXPECT_EQ(st.puts_written, 1u);
  EXPECT_EQ(st.puts_deduped, 2u);
}

TEST(DiskStore, QueueFullIsCountedAndRefused) {
  TempDir dir;
  FaultEnv env;
  auto store = OpenOrDie(dir.path(), 1 << 30, &env, 2);
  int refused = 0;
  for (uint32_t i = 0; i < 200; ++i) refused += store->PutAsync(MetaFor(i), PayloadPtr(i, 4096)) ? 0 : 1;
  store->Flush();
  Stats st = store->GetStats();
  EXPECT_GT(refused, 0);
  EXPECT_EQ(st.put_fail_queue_full, static_cast<uint64_t>(refused));
  EXPECT_EQ(st.puts_written + refused, 200u);
  ExpectAllIntact(*store);
}

TEST(DiskStore, ReopenSeesEverything) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    for (uint32_t i = 0; i < 50; ++i) {
      store->PutAsync(MetaFor(i, i % 3, i % 2 ? RecordKind::kSnapshot : RecordKind::kBlockRows),
                      PayloadPtr(i, 100 + i));
    }
  }  // the destructor drains the queue
  auto store = OpenOrDie(dir.path());
  Stats st = store->GetStats();
  EXPECT_EQ(st.records, 50u);
  EXPECT_EQ(st.recovery.records_kept, 50u);
  EXPECT_EQ(st.recovery.rebuilt_from_files, 0u);  // the index had them all
  EXPECT_FALSE(st.recovery.index_missing);
  EXPECT_EQ(ExpectAllIntact(*store), 50u);
  EXPECT_EQ(store->List(DomainOf(1)).size(), 17u);
  for (const RecordMeta& m : store->List(DomainOf(2))) EXPECT_EQ(m.domain, DomainOf(2));
}

TEST(DiskStore, ListedMetaMatchesWhatWasPut) {
  TempDir dir;
  RecordMeta meta = MetaFor(9, 1, RecordKind::kSnapshot, 5);
  {
    auto store = OpenOrDie(dir.path());
    store->PutAsync(meta, PayloadPtr(9, 77));
  }
  auto store = OpenOrDie(dir.path());
  auto list = store->List();
  ASSERT_EQ(list.size(), 1u);
  RecordMeta got = list[0];
  EXPECT_EQ(got.payload_bytes, 77u);
  EXPECT_GT(got.last_access_unix_ms, 0u);
  got.payload_bytes = 0;
  got.last_access_unix_ms = 0;
  EXPECT_EQ(got, meta);
}

TEST(DiskStore, RemoveAndClearByDomain) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  for (uint32_t i = 0; i < 30; ++i) store->PutAsync(MetaFor(i, i % 3), PayloadPtr(i, 64));
  store->Flush();
  EXPECT_TRUE(store->Remove(MetaFor(0).key, RecordKind::kBlockRows).ok());
  EXPECT_TRUE(store->Remove(MetaFor(0).key, RecordKind::kBlockRows).IsNotFound());
  EXPECT_TRUE(store->Get(MetaFor(0).key, RecordKind::kBlockRows).status().IsNotFound());
  ASSERT_TRUE(store->Clear(DomainOf(1)).ok());
  EXPECT_TRUE(store->List(DomainOf(1)).empty());
  EXPECT_EQ(store->List().size(), 19u);
  store.reset();
  store = OpenOrDie(dir.path());
  EXPECT_EQ(store->List().size(), 19u);
  EXPECT_TRUE(store->List(DomainOf(1)).empty());
  ASSERT_TRUE(store->Clear(std::nullopt).ok());
  EXPECT_TRUE(store->List().empty());
  EXPECT_EQ(store->GetStats().bytes, 0u);
  store.reset();
  EXPECT_TRUE(OpenOrDie(dir.path())->List().empty());
}

// An Env whose RemoveFile of a record file waits until released: the store must not hold its
// lock while deleting, so readers and writers go on meanwhile.
class BlockingRemoveEnv : public FaultEnv {
 public:
  Status RemoveFile(const std::string& path) override {
    if (block_ && path.find(".tmp") == std::string::npos) {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    }
    return FaultEnv::RemoveFile(path);
  }
  void Block() { block_ = true; }
  void WaitUntilRemoving() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::atomic<bool> block_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool released_ = false;
};

TEST(DiskStore, RemoveDeletesFilesWithoutHoldingTheLock) {
  TempDir dir;
  BlockingRemoveEnv env;
  auto store = OpenOrDie(dir.path(), 1 << 30, &env);
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(store->PutAsync(MetaFor(i), PayloadPtr(i, 64)));
  store->Flush();
  env.Block();
  std::thread remover([&] { EXPECT_TRUE(store->Remove(MetaFor(0).key, RecordKind::kBlockRows).ok()); });
  env.WaitUntilRemoving();
  // The file of record 0 is being deleted: the index answers, other records read.
  EXPECT_FALSE(store->Contains(MetaFor(0).key, RecordKind::kBlockRows));
  EXPECT_TRUE(store->Get(MetaFor(1).key, RecordKind::kBlockRows).ok());
  EXPECT_EQ(store->List().size(), 2u);
  // A new put of the same record is accepted and waits for the deletion before it publishes.
  EXPECT_TRUE(store->PutAsync(MetaFor(0), PayloadPtr(0, 64)));
  env.Release();
  remover.join();
  store->Flush();
  auto rec = store->Get(MetaFor(0).key, RecordKind::kBlockRows);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(*rec, PayloadFor(0, 64));
  EXPECT_EQ(ExpectAllIntact(*store), 3u);
}

TEST(DiskStore, QuotaIsNeverExceededAndEvictsLeastRecentlyUsed) {
  TempDir dir;
  FaultEnv env;
  uint64_t t = 1000;
  env.SetNowMillis(t);
  const uint64_t record_quota = QuotaBytesOf([] {
    RecordMeta m = MetaFor(0);
    m.payload_bytes = 1000;
    return m;
  }());
  const uint64_t quota = 33 + record_quota * 10 + record_quota / 2;
  auto store = OpenOrDie(dir.path(), quota, &env);
  for (uint32_t i = 0; i < 10; ++i) {
    env.SetNowMillis(++t);
    store->PutAsync(MetaFor(i), PayloadPtr(i, 1000));
    store->Flush();
  }
  EXPECT_EQ(store->GetStats().records, 10u);
  env.SetNowMillis(++t);
  ASSERT_TRUE(store->Get(MetaFor(0).key, RecordKind::kBlockRows).ok());  // 0 is now the newest
  for (uint32_t i = 10; i < 40; ++i) {
    env.SetNowMillis(++t);
    store->PutAsync(MetaFor(i, i % 2), PayloadPtr(i, 1000));
    store->Flush();
    Stats st = store->GetStats();
    ASSERT_LE(st.footprint_bytes(), quota);
    ASSERT_LE(FileBytesUnder(dir.path()), quota);
    if (i == 10) {
      EXPECT_TRUE(store->Get(MetaFor(0).key, RecordKind::kBlockRows).ok()) << "touched: kept";
      EXPECT_TRUE(store->Get(MetaFor(1).key, RecordKind::kBlockRows).status().IsNotFound());
    }
  }
  Stats st = store->GetStats();
  EXPECT_EQ(st.records, 10u);
  EXPECT_EQ(st.evictions, 30u);
  // Last access survives a reopen: the newest 10 stay in the same LRU order.
  auto before = store->List();
  store.reset();
  store = OpenOrDie(dir.path(), quota, &env);
  auto after = store->List();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].key, before[i].key);
  ExpectAllIntact(*store);
}

TEST(DiskStore, RecordLargerThanQuotaIsRefused) {
  TempDir dir;
  auto store = OpenOrDie(dir.path(), 500);
  store->PutAsync(MetaFor(1), PayloadPtr(1, 1000));
  store->Flush();
  Stats st = store->GetStats();
  EXPECT_EQ(st.put_fail_too_large, 1u);
  EXPECT_EQ(st.records, 0u);
}

TEST(DiskStore, SmallerQuotaAtReopenEvicts) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    for (uint32_t i = 0; i < 20; ++i) store->PutAsync(MetaFor(i), PayloadPtr(i, 1000));
  }
  auto store = OpenOrDie(dir.path(), 5 * 1200);
  Stats st = store->GetStats();
  EXPECT_LE(st.bytes, 5u * 1200);
  EXPECT_EQ(st.recovery.evicted_over_quota, 20u - st.records);
  ExpectAllIntact(*store);
}

TEST(DiskStore, RemoveCancelsQueuedPut) {
  TempDir dir;
  FaultEnv env;
  auto store = OpenOrDie(dir.path(), 1 << 30, &env);
  for (uint32_t i = 0; i < 20; ++i) store->PutAsync(MetaFor(i), PayloadPtr(i, 20000));
  ASSERT_TRUE(store->Clear(std::nullopt).ok());
  store->Flush();
  Stats st = store->GetStats();
  // Whatever the writer had not published is cancelled; nothing survives the Clear.
  EXPECT_EQ(st.records, 0u);
  EXPECT_EQ(st.puts_written + st.puts_cancelled, 20u);
  EXPECT_TRUE(store->List().empty());
  store.reset();
  EXPECT_TRUE(OpenOrDie(dir.path(), 1 << 30, &env)->List().empty());
}

TEST(DiskStore, IndexLogIsCompactedWhenItGrows) {
  TempDir dir;
  auto store = OpenOrDie(dir.path(), 1 << 30, FastEnv(), 1024);
  for (uint32_t i = 0; i < 700; ++i) store->PutAsync(MetaFor(i), PayloadPtr(i, 8));
  store->Flush();
  for (uint32_t i = 0; i < 690; ++i) store->Remove(MetaFor(i).key, RecordKind::kBlockRows);
  store->Flush();  // 1390 entries for 10 live records: rewritten as they came
  // At most the Header and twice the 10 live Add entries (205 bytes each).
  EXPECT_LE(std::filesystem::file_size(dir.Sub("index.log")), 17u + 2 * 10 * 205);
  EXPECT_GE(store->GetStats().index_compactions, 2u);
  store.reset();
  store = OpenOrDie(dir.path());
  Stats st = store->GetStats();
  EXPECT_EQ(st.records, 10u);
  EXPECT_EQ(st.recovery.rebuilt_from_files, 0u) << st.recovery.ToString();
  EXPECT_EQ(ExpectAllIntact(*store), 10u);
}

// Many put/evict cycles with reads (touches) between them: the files of the tier, records,
// index log and LOCK, never take more than the quota, and the log stays within twice its live
// entries, also across a reopen.
TEST(DiskStore, FootprintStaysWithinQuotaOverManyPutEvictCycles) {
  TempDir dir;
  const uint64_t quota = 256 << 10;
  auto store = OpenOrDie(dir.path(), quota);
  uint64_t max_index = 0;
  for (uint32_t i = 0; i < 3000; ++i) {
    const size_t payload = 300 + (i * 7919) % 6000;
    store->PutAsync(MetaFor(i, 0, RecordKind::kBlockRows, 256), PayloadPtr(i, payload));
    if (i % 3 == 0 && i > 20) store->Get(MetaFor(i - 17).key, RecordKind::kBlockRows);
    if (i % 10 != 9) continue;
    store->Flush();
    Stats st = store->GetStats();
    const uint64_t files = FileBytesUnder(dir.path());
    ASSERT_LE(files, quota) << "after put " << i << ": records " << st.bytes << ", index "
                            << st.index_bytes;
    ASSERT_LE(files - st.footprint_bytes(), 16u) << "only LOCK is outside the stats";
    ASSERT_LE(st.index_bytes, 17 + 2 * st.records * (9 + 16 + HeaderBodyBytes(256)));
    max_index = std::max(max_index, st.index_bytes);
  }
  Stats st = store->GetStats();
  EXPECT_GT(st.evictions, 2000u);
  EXPECT_GT(st.index_compactions, 10u);
  EXPECT_GT(max_index, 30000u) << "the log was compacted at twice its live size, not at once";
  store.reset();
  store = OpenOrDie(dir.path(), quota);
  st = store->GetStats();
  EXPECT_LE(FileBytesUnder(dir.path()), quota);
  EXPECT_EQ(st.recovery.rebuilt_from_files, 0u) << st.recovery.ToString();
  EXPECT_EQ(st.recovery.evicted_over_quota, 0u) << st.recovery.ToString();
  EXPECT_EQ(ExpectAllIntact(*store), st.records);
}

// Under a sustained load the foreground is always busy and the writer never idles: the log is
// still compacted as it grows (it used to wait for an idle moment or a Flush).
TEST(DiskStore, IndexLogIsCompactedWhileTheForegroundIsBusy) {
  TempDir dir;
  const uint64_t quota = 128 << 10;
  auto store = OpenOrDie(dir.path(), quota, FastEnv(), /*depth=*/2);  // writes at once
  store->SetForegroundBusy(true);
  uint32_t accepted = 0;
  for (uint32_t i = 0; i < 1500; ++i) {
    for (int tries = 0; tries < 10000; ++tries) {
      if (store->PutAsync(MetaFor(i, 0, RecordKind::kBlockRows, 256), PayloadPtr(i, 1500))) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ++accepted;
  }
  for (int waits = 0; waits < 10000; ++waits) {
    Stats st = store->GetStats();
    if (st.puts_written + st.puts_cancelled + st.put_fail_io >= accepted) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Stats st = store->GetStats();
  EXPECT_GT(st.evictions, 1000u);
  EXPECT_GT(st.index_compactions, 5u);
  EXPECT_LE(FileBytesUnder(dir.path()), quota)
      << "records " << st.bytes << ", index " << st.index_bytes;
  store->SetForegroundBusy(false);
}

// Reading keeps no memory per thread: a server's HTTP threads live as long as it does, and
// each one's restores read records. 32 threads each read a record and stay alive while the
// heap is measured; what reading left behind is at most the few shared slices a read goes
// through (SlicePool::kKept of 256 KiB), not one per thread (8 MiB here).
TEST(DiskStore, ReadingFromManyThreadsKeepsNoMemoryPerThread) {
  if (ReadProcessMemory().heap_in_use_bytes == 0) GTEST_SKIP() << "not glibc's malloc";
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  RecordMeta meta = MetaFor(3);
  ASSERT_TRUE(store->PutAsync(meta, PayloadPtr(3, 4096)));
  store->Flush();
  constexpr int kThreads = 32;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  bool release = false;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  auto heap = [] {
    ProcessMemory m = ReadProcessMemory();
    return int64_t(m.heap_in_use_bytes + m.heap_mapped_bytes);
  };
  // Every thread's first allocation (its arena) is made before the baseline.
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      std::vector<uint8_t> warm(1024);
      std::unique_lock<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
      cv.wait(lock, [&] { return done >= kThreads + 1; });
      lock.unlock();
      auto rec = store->Read(meta.key, RecordKind::kBlockRows);
      if (rec.ok() && rec->payload == PayloadFor(3, 4096)) ++ok;
      lock.lock();
      ++done;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  }
  int64_t before = 0;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == kThreads; });
    before = heap();
    ++done;
    cv.notify_all();
    cv.wait(lock, [&] { return done == 2 * kThreads + 1; });
  }
  const int64_t grown = heap() - before;
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads);
  EXPECT_LT(grown, int64_t(2) << 20) << "reading left " << grown << " bytes with the threads alive";
}

TEST(DiskStore, InvalidOptions) {
  DiskStore::Options o;
  EXPECT_EQ(DiskStore::Open(o).status().code(), Status::Code::kInvalidArgument);
  o.dir = "/tmp/x";
  EXPECT_EQ(DiskStore::Open(o).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace prefixd::store
