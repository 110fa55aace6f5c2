// Crash safety and corruption handling of the DiskStore, driven by FaultEnv. After every fault:
// Open succeeds, nothing corrupt or wrong is ever served, and the recovery report says what
// was dropped.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/disk_store.h"
#include "store/store_test_util.h"
#include "util/fault_env.h"

namespace prefixd::store {
namespace {

using testing::ExpectAllIntact;
using testing::MetaFor;
using testing::OpenStore;
using testing::PayloadFor;
using testing::PayloadPtr;
using testing::TempDir;
namespace fs = std::filesystem;

std::unique_ptr<DiskStore> MustOpen(const std::string& dir, Env* env, uint64_t quota = 1 << 30) {
  auto s = OpenStore(dir, env, quota);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

bool Has(DiskStore& store, uint32_t seed, RecordKind kind = RecordKind::kBlockRows) {
  for (const RecordMeta& m : store.List()) {
    if (m.key == MetaFor(seed).key && m.kind == kind) return true;
  }
  return false;
}

std::string PathOf(const std::string& dir, uint32_t seed, RecordKind kind = RecordKind::kBlockRows) {
  Key k = MetaFor(seed).key;
  return dir + "/records/" + DigestHex(k, 1) + "/" + RecordFileName({k, kind});
}

void WriteSeeds(const std::string& dir, Env* env, uint32_t from, uint32_t to, size_t bytes = 200) {
  auto store = MustOpen(dir, env);
  for (uint32_t i = from; i < to; ++i) ASSERT_TRUE(store->PutAsync(MetaFor(i), PayloadPtr(i, bytes)));
  store->Flush();
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

size_t TempFilesUnder(const std::string& dir) {
  size_t n = 0;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".tmp") ++n;
  }
  return n;
}

// A crash (then a power cut) before each operation of a put, in turn: the records flushed
// before it survive, the new one is either whole or absent, and Open reports the debris.
TEST(DiskStoreFault, CrashAtEveryStepOfAPut) {
  int64_t steps = 0;
  for (int64_t n = 0;; ++n) {
    ASSERT_LT(n, 200) << "the put never completed";
    TempDir dir;
    FaultEnv env;
    bool crashed = false;
    {
      auto store = MustOpen(dir.path(), &env);
      for (uint32_t i = 0; i < 3; ++i) store->PutAsync(MetaFor(i), PayloadPtr(i, 300));
      store->Flush();
      env.CrashAfterOps(n);
      store->PutAsync(MetaFor(100, 0, RecordKind::kSnapshot), PayloadPtr(100, 5000));
      store->Flush();
      crashed = env.crashed();
    }
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    env.ResetFaults();
    auto store = MustOpen(dir.path(), &env);
    ASSERT_NE(store, nullptr);
    const RecoveryReport& r = store->GetStats().recovery;
    for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(Has(*store, i)) << "step " << n << " lost " << i;
    EXPECT_EQ(ExpectAllIntact(*store), store->List().size()) << "step " << n;
    if (!crashed) EXPECT_TRUE(Has(*store, 100, RecordKind::kSnapshot));
    EXPECT_EQ(TempFilesUnder(dir.path()), 0u) << "step " << n << ": " << r.ToString();
    EXPECT_EQ(r.dropped_bad, 0u) << r.ToString();  // a crash never leaves a bad published file
    steps = n;
    if (!crashed) break;
  }
  EXPECT_GE(steps, 8);  // open, 3 appends, sync, close, rename, dir sync, ... were all crashed
}

// The same with a put that must first evict (quota full): bytes stay under the quota.
TEST(DiskStoreFault, CrashAtEveryStepOfAnEvictingPut) {
  const uint64_t quota = 3 * RecordFileBytes([] {
    RecordMeta m = MetaFor(0);
    m.payload_bytes = 1000;
    return m;
  }());
  for (int64_t n = 0;; ++n) {
    ASSERT_LT(n, 200);
    TempDir dir;
    FaultEnv env;
    bool crashed = false;
    {
      auto store = MustOpen(dir.path(), &env, quota);
      for (uint32_t i = 0; i < 3; ++i) {
        store->PutAsync(MetaFor(i), PayloadPtr(i, 1000));
        store->Flush();
      }
      env.CrashAfterOps(n);
      store->PutAsync(MetaFor(50), PayloadPtr(50, 1000));
      store->Flush();
      crashed = env.crashed();
    }
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    env.ResetFaults();
    auto store = MustOpen(dir.path(), &env, quota);
    Stats st = store->GetStats();
    EXPECT_LE(st.bytes, quota) << "step " << n;
    EXPECT_EQ(ExpectAllIntact(*store), st.records);
    if (!crashed) {
      EXPECT_TRUE(Has(*store, 50));
      EXPECT_FALSE(Has(*store, 0));  // the least recently used one went
      break;
    }
  }
}

// A crash at each step of Open's recovery (deleting debris, rewriting the index) is itself
// recovered by the next Open.
TEST(DiskStoreFault, CrashAtEveryStepOfRecovery) {
  for (int64_t n = 0;; ++n) {
    ASSERT_LT(n, 200);
    TempDir dir;
    FaultEnv env;
    WriteSeeds(dir.path(), &env, 0, 6);
    fs::remove(dir.Sub("index.log"));
    fs::create_directories(fs::path(PathOf(dir.path(), 7)).parent_path());
    std::ofstream(PathOf(dir.path(), 7) + ".tmp") << "torn";
    env.CrashAfterOps(n);
    bool crashed = false;
    {
      auto first = OpenStore(dir.path(), &env);
      crashed = env.crashed();
    }
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    env.ResetFaults();
    auto store = MustOpen(dir.path(), &env);
    EXPECT_EQ(store->List().size(), 6u) << "step " << n;
    EXPECT_EQ(ExpectAllIntact(*store), 6u);
    EXPECT_EQ(TempFilesUnder(dir.path()), 0u);
    if (!crashed) break;
  }
}

TEST(DiskStoreFault, TruncatedAndTornRecordFilesAreDropped) {
  TempDir dir;
  FaultEnv env;
  WriteSeeds(dir.path(), &env, 0, 12, 500);
  const uint64_t size = fs::file_size(PathOf(dir.path(), 0));
  const uint64_t cuts[] = {0, 5, 12, 60, 150, size - 510, size - 300, size - 4, size - 1};
  for (uint32_t i = 0; i < std::size(cuts); ++i) fs::resize_file(PathOf(dir.path(), i), cuts[i]);
  std::ofstream(PathOf(dir.path(), 9), std::ios::app) << "trailing garbage";
  auto store = MustOpen(dir.path(), &env);
  const RecoveryReport& r = store->GetStats().recovery;
  EXPECT_EQ(r.dropped_bad, 10u) << r.ToString();
  EXPECT_EQ(r.records_kept, 2u);
  EXPECT_EQ(r.dropped.size(), 10u);
  EXPECT_EQ(ExpectAllIntact(*store), 2u);
  EXPECT_TRUE(Has(*store, 10) && Has(*store, 11));
  for (uint32_t i = 0; i < 10; ++i) EXPECT_FALSE(fs::exists(PathOf(dir.path(), i)));
}

// A flipped byte anywhere in a record file is never served: Get returns Corruption and the
// record is quarantined.
TEST(DiskStoreFault, FlippedBitsOnDiskAreNeverServed) {
  TempDir dir;
  FaultEnv env;
  auto store = MustOpen(dir.path(), &env);
  const RecordMeta meta = MetaFor(3, 0, RecordKind::kBlockRows, 3);
  store->PutAsync(meta, PayloadPtr(3, 40));
  store->Flush();
  const std::string path = PathOf(dir.path(), 3);
  const uint64_t size = fs::file_size(path);
  uint64_t corrupt = 0;
  for (uint64_t off = 0; off < size; ++off) {
    FlipByte(path, off);
    auto got = store->Get(meta.key, meta.kind);
    ASSERT_FALSE(got.ok()) << "served a record with byte " << off << " flipped";
    EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
    corrupt += got.status().IsCorruption();
    EXPECT_FALSE(fs::exists(path)) << "not quarantined";
    EXPECT_FALSE(Has(*store, 3));
    store->PutAsync(meta, PayloadPtr(3, 40));
    store->Flush();
    ASSERT_TRUE(store->Get(meta.key, meta.kind).ok());
  }
  Stats st = store->GetStats();
  EXPECT_EQ(st.get_corrupt, corrupt);
  EXPECT_EQ(st.quarantined, size);
}

// The payload is read and checked in slices of 256 KiB (the checksum trailer may straddle two):
// payloads around the slice size round-trip, and a byte flipped at either side of a slice
// boundary or in the trailer is never served.
TEST(DiskStoreFault, FlipsAcrossPayloadReadSlicesAreNeverServed) {
  constexpr size_t kSlice = size_t(256) << 10;
  TempDir dir;
  auto store = MustOpen(dir.path(), nullptr);
  uint32_t seed = 20;
  for (size_t n : {kSlice - 4, kSlice - 2, kSlice, kSlice + 1, 2 * kSlice + 3}) {
    const RecordMeta meta = MetaFor(seed, 0, RecordKind::kBlockRows, 3);
    store->PutAsync(meta, PayloadPtr(seed, n));
    store->Flush();
    auto got = store->Get(meta.key, meta.kind);
    ASSERT_TRUE(got.ok()) << n << ": " << got.status().ToString();
    EXPECT_EQ(*got, PayloadFor(seed, n)) << n;
    const std::string path = PathOf(dir.path(), seed);
    const uint64_t size = fs::file_size(path);
    const uint64_t payload_at = size - n - 4;
    for (uint64_t off : {payload_at, payload_at + kSlice - 1, payload_at + kSlice,
                         size - 5, size - 4, size - 1}) {
      if (off >= size) continue;
      FlipByte(path, off);
      auto bad = store->Get(meta.key, meta.kind);
      ASSERT_FALSE(bad.ok()) << "served a " << n << "-byte payload with byte " << off << " flipped";
      EXPECT_TRUE(bad.status().IsCorruption()) << bad.status().ToString();
      store->PutAsync(meta, PayloadPtr(seed, n));
      store->Flush();
      ASSERT_TRUE(store->Get(meta.key, meta.kind).ok());
    }
    ++seed;
  }
}

TEST(DiskStoreFault, FlippedBitsOnReadAreNeverServed) {
  TempDir dir;
  FaultEnv env;
  auto store = MustOpen(dir.path(), &env);
  const RecordMeta meta = MetaFor(4);
  store->PutAsync(meta, PayloadPtr(4, 100));
  store->Flush();
  const uint64_t size = fs::file_size(PathOf(dir.path(), 4));
  for (uint64_t off = 0; off < size; off += 7) {
    env.SetReadBitFlip(RecordFileName(IdOf(meta)), off);
    auto got = store->Get(meta.key, meta.kind);
    ASSERT_FALSE(got.ok()) << "byte " << off;
    EXPECT_TRUE(got.status().IsCorruption());
    env.SetReadBitFlip("", 0);
    store->PutAsync(meta, PayloadPtr(4, 100));
    store->Flush();
  }
  EXPECT_EQ(ExpectAllIntact(*store), 1u);
}

TEST(DiskStoreFault, CorruptHeaderIsDroppedAtOpenWhenTheIndexIsGone) {
  TempDir dir;
  FaultEnv env;
  WriteSeeds(dir.path(), &env, 0, 5);
  FlipByte(PathOf(dir.path(), 2), 40);   // in the header body
  FlipByte(PathOf(dir.path(), 3), 0);    // the magic
  fs::remove(dir.Sub("index.log"));
  auto store = MustOpen(dir.path(), &env);
  const RecoveryReport& r = store->GetStats().recovery;
  EXPECT_TRUE(r.index_missing);
  EXPECT_EQ(r.dropped_bad, 2u);
  EXPECT_EQ(r.rebuilt_from_files, 3u);
  ASSERT_EQ(r.dropped.size(), 2u);
  std::string all = r.dropped[0] + r.dropped[1];
  EXPECT_NE(all.find("header checksum mismatch"), std::string::npos) << all;
  EXPECT_NE(all.find("bad magic"), std::string::npos) << all;
  EXPECT_EQ(ExpectAllIntact(*store), 3u);
}

// Cutting the index anywhere (or replacing it with garbage, or deleting it) loses nothing:
// the record files are rebuilt from their headers.
TEST(DiskStoreFault, TruncatedOrDeletedIndexIsRebuilt) {
  TempDir dir;
  FaultEnv env;
  WriteSeeds(dir.path(), &env, 0, 20);
  {
    auto store = MustOpen(dir.path(), &env);
    for (uint32_t i = 0; i < 5; ++i) store->Remove(MetaFor(i).key, RecordKind::kBlockRows);
    for (uint32_t i = 5; i < 10; ++i) store->Get(MetaFor(i).key, RecordKind::kBlockRows);
  }
  const std::string index = dir.Sub("index.log");
  const std::string saved = dir.Sub("index.saved");
  fs::copy_file(index, saved);
  const uint64_t size = fs::file_size(index);
  for (uint64_t cut = 0; cut <= size; cut += std::max<uint64_t>(1, size / 40)) {
    fs::copy_file(saved, index, fs::copy_options::overwrite_existing);
    fs::resize_file(index, cut);
    auto store = MustOpen(dir.path(), &env);
    const RecoveryReport& r = store->GetStats().recovery;
    EXPECT_EQ(r.records_kept, 15u) << "cut at " << cut << ": " << r.ToString();
    EXPECT_TRUE(r.index_missing || r.index_torn_bytes > 0 || cut == size) << cut;
    EXPECT_EQ(ExpectAllIntact(*store), 15u);
  }
  std::ofstream(index, std::ios::trunc) << std::string(3000, 'x');
  EXPECT_EQ(MustOpen(dir.path(), &env)->List().size(), 15u);
  fs::remove(index);
  auto store = MustOpen(dir.path(), &env);
  EXPECT_TRUE(store->GetStats().recovery.index_missing);
  EXPECT_EQ(ExpectAllIntact(*store), 15u);
}

TEST(DiskStoreFault, NoSpaceDropsTheRecordAndTheStoreStaysUsable) {
  TempDir dir;
  FaultEnv env;
  auto store = MustOpen(dir.path(), &env);
  store->PutAsync(MetaFor(1), PayloadPtr(1, 100));
  store->Flush();
  env.SetNoSpaceAfterBytes(2000);
  for (uint32_t i = 2; i < 6; ++i) store->PutAsync(MetaFor(i), PayloadPtr(i, 1500));
  store->Flush();
  Stats st = store->GetStats();
  EXPECT_GE(st.put_fail_no_space, 3u);
  EXPECT_EQ(st.puts_written + st.put_fail_no_space, 5u);
  EXPECT_EQ(TempFilesUnder(dir.path()), 0u);
  EXPECT_EQ(ExpectAllIntact(*store), st.records);
  env.ResetFaults();
  store->PutAsync(MetaFor(9), PayloadPtr(9, 1500));
  store->Flush();
  EXPECT_TRUE(Has(*store, 9));
  store.reset();
  store = MustOpen(dir.path(), &env);
  EXPECT_EQ(ExpectAllIntact(*store), store->List().size());
  EXPECT_TRUE(Has(*store, 1) && Has(*store, 9));
}

// The k-th operation of each kind fails once during a put: the put is dropped or done,
// never half done.
TEST(DiskStoreFault, EachKindOfOperationFailingOnce) {
  using Op = FaultEnv::Op;
  for (Op op : {Op::kOpenWrite, Op::kAppend, Op::kSync, Op::kClose, Op::kRename, Op::kSyncDir,
                Op::kCreateDir, Op::kRead}) {
    for (int64_t k = 1; k <= 3; ++k) {
      TempDir dir;
      FaultEnv env;
      auto store = MustOpen(dir.path(), &env);
      env.FailNthOp(op, k);
      store->PutAsync(MetaFor(1), PayloadPtr(1, 100));
      store->PutAsync(MetaFor(2), PayloadPtr(2, 100));
      store->Flush();
      store->Get(MetaFor(1).key, RecordKind::kBlockRows);
      store->Get(MetaFor(2).key, RecordKind::kBlockRows);
      EXPECT_EQ(ExpectAllIntact(*store), store->List().size());
      EXPECT_EQ(TempFilesUnder(dir.path()), 0u);
      store.reset();
      store = MustOpen(dir.path(), &env);
      EXPECT_EQ(ExpectAllIntact(*store), store->List().size());
    }
  }
}

TEST(DiskStoreFault, FileDeletedBehindTheStoresBack) {
  TempDir dir;
  FaultEnv env;
  WriteSeeds(dir.path(), &env, 0, 4);
  auto store = MustOpen(dir.path(), &env);
  fs::remove(PathOf(dir.path(), 1));
  auto got = store->Get(MetaFor(1).key, RecordKind::kBlockRows);
  EXPECT_TRUE(got.status().IsNotFound()) << got.status().ToString();
  EXPECT_FALSE(Has(*store, 1));
  EXPECT_EQ(store->GetStats().get_not_found, 1u);
  fs::remove(PathOf(dir.path(), 2));
  EXPECT_EQ(store->Verify().bad, 1u);
  EXPECT_FALSE(Has(*store, 2));
  fs::remove(PathOf(dir.path(), 3));
  store.reset();
  store = MustOpen(dir.path(), &env);
  EXPECT_EQ(store->GetStats().recovery.dropped_missing, 1u);
  EXPECT_EQ(ExpectAllIntact(*store), 1u);
}

TEST(DiskStoreFault, ReadOnlyFileSystem) {
  TempDir dir;
  FaultEnv env;
  WriteSeeds(dir.path(), &env, 0, 3);
  env.SetReadOnly(true);
  auto store = MustOpen(dir.path(), &env);  // opens, reads still work
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ExpectAllIntact(*store), 3u);
  EXPECT_TRUE(store->PutAsync(MetaFor(5), PayloadPtr(5, 10)));
  store->Flush();
  Stats st = store->GetStats();
  EXPECT_EQ(st.put_fail_io, 1u);
  EXPECT_EQ(st.records, 3u);
  env.SetReadOnly(false);
  store->PutAsync(MetaFor(6), PayloadPtr(6, 10));
  store->Flush();
  EXPECT_TRUE(Has(*store, 6));
}

TEST(DiskStoreFault, RealReadOnlyDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  WriteSeeds(dir.path(), Env::Default(), 0, 2);
  fs::permissions(dir.Sub("records"), fs::perms::owner_write | fs::perms::group_write |
                                          fs::perms::others_write, fs::perm_options::remove);
  for (auto& e : fs::directory_iterator(dir.Sub("records"))) {
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::remove);
  }
  {
    auto store = MustOpen(dir.path(), Env::Default());
    store->PutAsync(MetaFor(5), PayloadPtr(5, 10));
    store->Flush();
    EXPECT_GE(store->GetStats().put_fail_io, 1u);
    EXPECT_EQ(ExpectAllIntact(*store), 2u);
  }
  for (auto& e : fs::recursive_directory_iterator(dir.Sub("records"))) {
    fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
  }
  fs::permissions(dir.Sub("records"), fs::perms::owner_all, fs::perm_options::add);
}

}  // namespace
}  // namespace prefixd::store
