#include "util/pool_warmer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace prefixd {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// Waits (at most 10 s) until the pool has warmed `n` buffers.
bool AwaitWarmed(const BufferPool& pool, uint64_t n) {
  for (int i = 0; i < 1000; ++i) {
    if (pool.GetStats().warmed >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A size taken fresh is warmed without anyone calling WarmOne, and serves the next Take of it.
TEST(PoolWarmerTest, WarmsWhatWasTakenWhileTheTakerGoesOn) {
  BufferPool pool(64 * kMiB);
  PoolWarmer warmer(pool);
  std::vector<uint8_t> first = pool.Take(6 * kMiB);
  EXPECT_EQ(pool.GetStats().reused, 0u);
  ASSERT_TRUE(AwaitWarmed(pool, 1));
  EXPECT_EQ(pool.GetStats().kept_bytes, 6 * kMiB);
  EXPECT_EQ(pool.GetStats().noted_bytes, 0u);
  std::vector<uint8_t> second = pool.Take(6 * kMiB);
  EXPECT_EQ(pool.GetStats().reused, 1u);
  EXPECT_NE(second.data(), first.data());
  // The served Take is refilled too: the next one is served again.
  ASSERT_TRUE(AwaitWarmed(pool, 2));
  std::vector<uint8_t> third = pool.Take(6 * kMiB);
  EXPECT_EQ(pool.GetStats().reused, 2u);
}

// It keeps within the pool's limit: a size it has no room for drops the notes, not retried.
TEST(PoolWarmerTest, StaysWithinTheLimit) {
  BufferPool pool(8 * kMiB);
  std::vector<uint8_t> a = pool.Take(3 * kMiB), b = pool.Take(3 * kMiB);  // both noted
  pool.Give(std::vector<uint8_t>(4 * kMiB));  // kept; too large to refill a 3 MiB note
  ASSERT_EQ(pool.GetStats().noted_bytes, 6 * kMiB);
  PoolWarmer warmer(pool);
  ASSERT_TRUE(AwaitWarmed(pool, 1));
  for (int i = 0; i < 500 && pool.GetStats().noted_bytes != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const BufferPoolStats s = pool.GetStats();
  EXPECT_EQ(s.warmed, 1u) << "4 + 3 MiB kept: no room for another 3";
  EXPECT_EQ(s.kept_bytes, 7 * kMiB);
  EXPECT_EQ(s.noted_bytes, 0u);
}

// Destroyed while it waits for a size, or while sizes are still noted, it stops at once.
TEST(PoolWarmerTest, StopsWhenDestroyed) {
  BufferPool pool(256 * kMiB);
  const auto t0 = std::chrono::steady_clock::now();
  { PoolWarmer idle(pool); }
  {
    PoolWarmer busy(pool);
    for (int i = 0; i < 8; ++i) pool.Take(24 * kMiB);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  const BufferPoolStats s = pool.GetStats();
  EXPECT_LE(s.warmed, 8u);
  EXPECT_EQ(s.kept_bytes, (s.warmed - s.reused) * 24 * kMiB) << "only whole buffers are kept";
}

}  // namespace
}  // namespace prefixd
