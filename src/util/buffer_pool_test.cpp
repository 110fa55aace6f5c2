#include "util/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

namespace prefixd {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

std::vector<uint8_t> Filled(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

TEST(BufferPoolTest, AFreshBufferIsZeroedAndSized) {
  BufferPool pool(16 * kMiB);
  std::vector<uint8_t> b = pool.Take(3 * kMiB + 5);
  ASSERT_EQ(b.size(), 3 * kMiB + 5);
  size_t nonzero = 0;
  for (uint8_t x : b) nonzero += x != 0;
  EXPECT_EQ(nonzero, 0u);
  EXPECT_EQ(pool.GetStats().takes, 1u);
  EXPECT_EQ(pool.GetStats().reused, 0u);
}

// A buffer given back serves the next Take of its size or a little less, with the bytes its
// last owner left: no page of it is touched again.
TEST(BufferPoolTest, AGivenBufferIsTakenAgainAsItWasLeft) {
  BufferPool pool(16 * kMiB);
  std::vector<uint8_t> b = Filled(4 * kMiB, 7);
  const uint8_t* where = b.data();
  pool.Give(std::move(b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.GetStats().kept_bytes, 4 * kMiB);
  std::vector<uint8_t> again = pool.Take(4 * kMiB - 100);
  EXPECT_EQ(again.data(), where);
  ASSERT_EQ(again.size(), 4 * kMiB - 100);
  EXPECT_EQ(again.front(), 7);
  EXPECT_EQ(again.back(), 7);
  EXPECT_EQ(pool.GetStats().reused, 1u);
  EXPECT_EQ(pool.GetStats().kept_bytes, 0u);
}

// Shortest fit within a quarter: a much larger buffer is not spent on a small request, and a
// shorter one never serves a longer one.
TEST(BufferPoolTest, TakesTheShortestBufferWithinAQuarter) {
  BufferPool pool(64 * kMiB);
  std::vector<uint8_t> big = Filled(8 * kMiB, 1), mid = Filled(5 * kMiB, 2), small = Filled(2 * kMiB, 3);
  pool.Give(std::move(big));
  pool.Give(std::move(mid));
  pool.Give(std::move(small));
  EXPECT_EQ(pool.Take(3 * kMiB).front(), 0) << "no kept buffer is within a quarter of 3 MiB";
  EXPECT_EQ(pool.Take(4 * kMiB + kMiB / 2).front(), 2);
  EXPECT_EQ(pool.Take(7 * kMiB).front(), 1);
  EXPECT_EQ(pool.Take(2 * kMiB).front(), 3);
  EXPECT_EQ(pool.GetStats().reused, 3u);
}

// At most `limit` bytes: the oldest kept buffers go first; one larger than the limit, a small
// one, or any with limit 0 is freed, not kept.
TEST(BufferPoolTest, KeepsAtMostTheLimitDroppingTheOldest) {
  BufferPool pool(5 * kMiB / 2);
  for (uint8_t v : {1, 2, 3}) pool.Give(Filled(kMiB, v));
  EXPECT_EQ(pool.GetStats().kept_bytes, 2 * kMiB);
  EXPECT_EQ(pool.GetStats().dropped, 1u);
  EXPECT_EQ(pool.Take(kMiB).front(), 2);
  EXPECT_EQ(pool.Take(kMiB).front(), 3);
  EXPECT_EQ(pool.Take(kMiB).front(), 0);

  pool.Give(Filled(3 * kMiB, 9));
  pool.Give(Filled(kMiB - 1, 9));
  EXPECT_EQ(pool.GetStats().kept_bytes, 0u);

  BufferPool off(0);
  off.Give(Filled(kMiB, 1));
  EXPECT_EQ(off.GetStats().kept_bytes, 0u);
  off.RaiseLimit(2 * kMiB);
  off.RaiseLimit(kMiB);  // never lowered
  EXPECT_EQ(off.GetStats().limit, 2 * kMiB);
}

// A size no kept buffer served is warmed for the next Take of it: that one is served.
TEST(BufferPoolTest, ASizeThatMissedIsWarmedForTheNextTake) {
  BufferPool pool(16 * kMiB);
  EXPECT_FALSE(pool.WarmOne({})) << "nothing noted";
  pool.Take(3 * kMiB);
  pool.Take(2 * kMiB);
  EXPECT_EQ(pool.GetStats().noted_bytes, 5 * kMiB);
  EXPECT_TRUE(pool.WarmOne({})) << "one more noted";
  EXPECT_FALSE(pool.WarmOne({})) << "the last";
  EXPECT_EQ(pool.GetStats().warmed, 2u);
  EXPECT_EQ(pool.GetStats().kept_bytes, 5 * kMiB);
  EXPECT_EQ(pool.GetStats().noted_bytes, 0u);
  std::vector<uint8_t> b = pool.Take(3 * kMiB);
  EXPECT_EQ(pool.GetStats().reused, 1u);
  ASSERT_EQ(b.size(), 3 * kMiB);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), 0);
  std::vector<uint8_t> c;
  EXPECT_TRUE(pool.TakeKept(2 * kMiB - 1000, &c));
  EXPECT_EQ(pool.GetStats().noted_bytes, 5 * kMiB - 1000) << "served, and noted to refill";
}

// Requests that each take the same few buffers: the pool refills what each took while idle,
// so every request after the first is served, not every other one (warming only the sizes
// that missed left nothing noted after a request the warmed buffers served).
TEST(BufferPoolTest, WhatARequestTookIsRefilledForTheNext) {
  BufferPool pool(64 * kMiB);
  for (int request = 0; request < 4; ++request) {
    const uint64_t reused = pool.GetStats().reused;
    std::vector<std::vector<uint8_t>> taken;
    for (int i = 0; i < 3; ++i) taken.push_back(pool.Take(4 * kMiB + 100));
    if (request > 0) EXPECT_EQ(pool.GetStats().reused, reused + 3) << "request " << request;
    while (pool.WarmOne({})) {
    }
    EXPECT_EQ(pool.GetStats().kept_bytes, 3 * (4 * kMiB + 100)) << "request " << request;
    EXPECT_EQ(pool.GetStats().noted_bytes, 0u);
  }  // the payloads are freed, not given back: the RAM tier keeps its entries
}

// A buffer given back (a payload the RAM tier evicted) that would serve a noted size refills
// it: nothing is warmed for it. One that would not leaves the note.
TEST(BufferPoolTest, ABufferGivenBackRefillsANotedSize) {
  BufferPool pool(64 * kMiB);
  pool.Take(4 * kMiB);
  pool.Take(8 * kMiB);
  EXPECT_EQ(pool.GetStats().noted_bytes, 12 * kMiB);
  pool.Give(Filled(2 * kMiB, 1));  // serves neither
  EXPECT_EQ(pool.GetStats().noted_bytes, 12 * kMiB);
  pool.Give(Filled(4 * kMiB + kMiB / 2, 1));  // within a quarter of 4 MiB
  EXPECT_EQ(pool.GetStats().noted_bytes, 8 * kMiB);
  EXPECT_FALSE(pool.WarmOne({})) << "only 8 MiB left to warm";
  EXPECT_EQ(pool.GetStats().warmed, 1u);
  EXPECT_EQ(pool.GetStats().kept_bytes, 2 * kMiB + (4 * kMiB + kMiB / 2) + 8 * kMiB);
}

// A capture takes room for a trailer and the Snapshot it becomes uses part of it (8 of 64
// bytes): given back when evicted, its allocation serves the next capture of that size.
TEST(BufferPoolTest, AGivenBufferServesByItsAllocationNotItsSize) {
  BufferPool pool(64 * kMiB);
  std::vector<uint8_t> snap = pool.Take(4 * kMiB + 64);
  snap.resize(4 * kMiB + 8);
  const uint8_t* data = snap.data();
  pool.Give(std::move(snap));
  EXPECT_EQ(pool.GetStats().kept_bytes, 4 * kMiB + 64) << "counted by its allocation";
  const uint64_t reused = pool.GetStats().reused;
  std::vector<uint8_t> next = pool.Take(4 * kMiB + 64);
  EXPECT_EQ(pool.GetStats().reused, reused + 1);
  EXPECT_EQ(next.data(), data);
  ASSERT_EQ(next.size(), 4 * kMiB + 64);
  EXPECT_EQ(pool.GetStats().kept_bytes, 0u);
}

// Stopped between pieces: nothing kept, the size still noted for the next idle time.
TEST(BufferPoolTest, WarmingStopsWhenAskedAndResumesLater) {
  BufferPool pool(64 * kMiB);
  pool.Take(20 * kMiB);
  int asked = 0;
  EXPECT_FALSE(pool.WarmOne([&] { return ++asked == 2; }));
  EXPECT_EQ(asked, 2) << "asked before each piece, not once for the whole buffer";
  EXPECT_EQ(pool.GetStats().kept_bytes, 0u);
  EXPECT_EQ(pool.GetStats().noted_bytes, 20 * kMiB);
  EXPECT_FALSE(pool.WarmOne([] { return false; }));
  EXPECT_EQ(pool.GetStats().kept_bytes, 20 * kMiB);
}

// Warming never passes the limit: with the kept buffers leaving no room the notes are dropped
// (what is kept serves), and the notes themselves stay within the limit, newest kept.
TEST(BufferPoolTest, WarmingStaysWithinTheLimit) {
  BufferPool pool(4 * kMiB);
  pool.Take(3 * kMiB);
  pool.Take(3 * kMiB);
  EXPECT_EQ(pool.GetStats().noted_bytes, 3 * kMiB) << "the older note dropped";
  pool.Take(5 * kMiB);
  EXPECT_EQ(pool.GetStats().noted_bytes, 3 * kMiB) << "larger than the limit: never kept";
  pool.Take(kMiB);
  EXPECT_FALSE(pool.WarmOne({}) && pool.WarmOne({}));
  EXPECT_EQ(pool.GetStats().kept_bytes, 4 * kMiB);
  pool.Take(2 * kMiB);  // nothing kept fits: noted
  EXPECT_FALSE(pool.WarmOne({}));
  EXPECT_EQ(pool.GetStats().kept_bytes, 4 * kMiB);
  EXPECT_EQ(pool.GetStats().noted_bytes, 0u);
  BufferPool off(0);
  off.Take(2 * kMiB);
  EXPECT_FALSE(off.WarmOne({}));
  EXPECT_EQ(off.GetStats().kept_bytes, 0u);
}

TEST(BufferPoolTest, ManyThreadsTakeAndGive) {
  BufferPool pool(32 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 200; ++i) {
        std::vector<uint8_t> b = pool.Take(kMiB + size_t((i + t) % 3) * 4096);
        b[0] = uint8_t(t);
        pool.Give(std::move(b));
      }
    });
  }
  for (auto& th : threads) th.join();
  const BufferPoolStats s = pool.GetStats();
  EXPECT_EQ(s.takes, 800u);
  EXPECT_GT(s.reused, 0u);
  EXPECT_LE(s.kept_bytes, 32 * kMiB);
}

}  // namespace
}  // namespace prefixd
