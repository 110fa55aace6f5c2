// Several threads look up, insert, pin and evict on one PrefixCache. Run under
// ThreadSanitizer (-DPREFIXD_TSAN=ON). Every payload is tagged with the prefix it belongs to,
// so each thread checks that what it restores belongs to its own request.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "cache/cache_test_util.h"
#include "cache/prefix_cache.h"

namespace prefixd::cache {
namespace {

using testing::MakePayload;
using testing::PrefixTag;
constexpr size_t kB = 8;

std::span<const Token> First(const std::vector<Token>& t, size_t n) {
  return std::span<const Token>(t).first(n);
}

// A conversation: a shared system prompt, then the thread's own turns.
std::vector<Token> Conversation(std::mt19937& rng) {
  std::vector<Token> t(3 * kB, 7);  // shared by every thread
  size_t n = std::uniform_int_distribution<size_t>(1, 5 * kB)(rng);
  for (size_t i = 0; i < n; ++i) t.push_back(static_cast<Token>(rng() % 3));
  return t;
}

void CheckMatch(const PrefixCache::Match& m, const std::vector<Token>& t) {
  size_t pos = 0;
  for (const auto& span : m.rows) {
    if (span.n_tokens == kB) {
      ASSERT_EQ(testing::PayloadTag(span.rows), PrefixTag(First(t, pos + kB)));
    }
    pos += span.n_tokens;
  }
  if (m.snapshot) ASSERT_EQ(testing::PayloadTag(m.snapshot), PrefixTag(First(t, m.n_tokens)));
}

void Worker(PrefixCache& cache, const Digest& domain, uint32_t seed, int n_ops) {
  std::mt19937 rng(seed);
  bool snapshots = cache.options().needs_snapshot;
  for (int op = 0; op < n_ops; ++op) {
    std::vector<Token> t = Conversation(rng);
    PrefixCache::Match m = cache.Lookup(domain, t, t.size() - 1);
    CheckMatch(m, t);
    for (size_t k = m.n_tokens / kB; (k + 1) * kB <= t.size(); ++k) {
      auto prefix = First(t, (k + 1) * kB);
      cache.InsertBlock(domain, prefix, MakePayload(16 + rng() % 32, PrefixTag(prefix)));
    }
    size_t p = t.size() - 1;
    auto prefix = First(t, p);
    PayloadRef snap = snapshots ? MakePayload(16 + rng() % 48, PrefixTag(prefix)) : nullptr;
    PayloadRef rows = p % kB != 0 ? MakePayload(16, 0) : nullptr;
    if (snap || rows) {
      cache.InsertSnapshot(domain, prefix, SnapshotKind::kTail, std::move(snap), std::move(rows));
    }
    if (op % 50 == 0) cache.Trim(cache.options().ram_budget_bytes / 2);
    // m (and its pins) is released here, after the inserts that may have wanted its room.
  }
}

void RunThreads(PrefixCache::Options o) {
  PrefixCache cache(o);
  Digest domain = testing::TestDomain(9);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      Stats s = cache.GetStats();
      ASSERT_LE(s.ram.total(), o.ram_budget_bytes);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (uint32_t i = 0; i < 4; ++i) {
    workers.emplace_back(Worker, std::ref(cache), std::cref(domain), i + 1, 400);
  }
  for (auto& w : workers) w.join();
  done = true;
  watcher.join();
  Status st = cache.CheckConsistency();
  ASSERT_TRUE(st.ok()) << st.ToString();
  Stats s = cache.GetStats();
  EXPECT_EQ(s.lookups, 1600u);
  EXPECT_GT(s.hits, 100u);
  EXPECT_GT(s.evictions, 0u);
}

TEST(ConcurrencyTest, AttentionThreadsShareOneCache) {
  RunThreads(PrefixCache::Options{kB, 2000, true, false});
}

TEST(ConcurrencyTest, HybridThreadsShareOneCache) {
  RunThreads(PrefixCache::Options{kB, 3000, true, true});
}

}  // namespace
}  // namespace prefixd::cache
