// DiskStore::SetRecordListener: the listener hears of every record the index gains and loses,
// and a (re)attached listener first hears of everything held, parents (lower positions) first.
#include "store/record_listener.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "store/disk_store.h"
#include "store/store_test_util.h"
#include "util/fault_env.h"

namespace prefixd::store {
namespace {

using testing::MetaFor;
using testing::PayloadPtr;
using testing::TempDir;

struct Heard : RecordListener {
  void OnRecordAdded(const RecordMeta& m) override { added.push_back(m.position); }
  void OnRecordRemoved(const RecordMeta& m) override { removed.push_back(m.position); }
  std::vector<uint32_t> added, removed;
};

std::unique_ptr<DiskStore> Open(const std::string& dir, Env* env, uint64_t quota = 1 << 30) {
  DiskStore::Options o;
  o.dir = dir;
  o.quota_bytes = quota;
  o.env = env;
  auto s = DiskStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(RecordListener, HearsWritesRemovesAndClear) {
  TempDir dir;
  FaultEnv env;
  auto store = Open(dir.path(), &env);
  Heard h;
  store->SetRecordListener(&h);
  EXPECT_TRUE(h.added.empty());
  ASSERT_TRUE(store->PutAsync(MetaFor(16), PayloadPtr(16, 100)));
  ASSERT_TRUE(store->PutAsync(MetaFor(32), PayloadPtr(32, 100)));
  store->Flush();
  EXPECT_EQ(h.added, (std::vector<uint32_t>{16, 32}));
  ASSERT_TRUE(store->Remove(MetaFor(16).key, RecordKind::kBlockRows).ok());
  EXPECT_EQ(h.removed, (std::vector<uint32_t>{16}));
  ASSERT_TRUE(store->Clear(std::nullopt).ok());
  EXPECT_EQ(h.removed, (std::vector<uint32_t>{16, 32}));
  store->SetRecordListener(nullptr);
  ASSERT_TRUE(store->PutAsync(MetaFor(48), PayloadPtr(48, 100)));
  store->Flush();
  EXPECT_EQ(h.added.size(), 2u) << "a detached listener was told";
}

// Evictions under the quota are losses too; reopened, the store tells a new listener what it
// recovered, by position.
TEST(RecordListener, EvictionsAreHeardAndAttachingListsWhatIsHeldByPosition) {
  TempDir dir;
  FaultEnv env;
  const uint64_t one = QuotaBytesOf(MetaFor(16));
  std::vector<uint32_t> survivors;
  {
    auto store = Open(dir.path(), &env, one * 3 + one / 2);
    Heard h;
    store->SetRecordListener(&h);
    for (uint32_t p : {48u, 16u, 32u, 64u}) {
      ASSERT_TRUE(store->PutAsync(MetaFor(p), PayloadPtr(p, 100)));
      store->Flush();
    }
    EXPECT_EQ(h.added, (std::vector<uint32_t>{48, 16, 32, 64}));
    ASSERT_FALSE(h.removed.empty()) << "the quota evicted nothing, or evicted unheard";
    EXPECT_EQ(h.removed[0], 48u) << "the least recently used goes first";
    for (uint32_t p : h.removed) std::erase(h.added, p);
    survivors = h.added;
    std::sort(survivors.begin(), survivors.end());
  }
  auto store = Open(dir.path(), &env);
  Heard h;
  store->SetRecordListener(&h);
  EXPECT_EQ(h.added, survivors);
  store->SetRecordListener(&h);  // again: everything held, again
  EXPECT_EQ(h.added.size(), 2 * survivors.size());
}

}  // namespace
}  // namespace prefixd::store
