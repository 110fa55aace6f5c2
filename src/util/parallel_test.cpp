#include "util/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace prefixd {
namespace {

TEST(ParallelForTest, RunsEveryItemOnceAndItemZeroOnTheCaller) {
  for (size_t threads : {0, 1, 2, 4, 16}) {
    for (size_t n : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> runs(n);
      std::thread::id item0;
      ParallelFor(n, threads, [&](size_t i) {
        if (i == 0) item0 = std::this_thread::get_id();
        runs[i].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << i << " of " << n;
      if (n > 0) EXPECT_EQ(item0, std::this_thread::get_id());
    }
  }
}

TEST(ParallelForTest, UsesNoMoreThreadsThanAsked) {
  std::mutex mu;
  std::set<std::thread::id> seen;
  ParallelFor(64, 3, [&](size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_LE(seen.size(), 3u);
  EXPECT_GE(seen.size(), 1u);
}

TEST(ParallelForTest, OneThreadRunsInOrder) {
  std::vector<size_t> order;
  ParallelFor(5, 1, [&](size_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

TEST(SpareThreadsTest, BetweenOneAndTheCap) {
  EXPECT_EQ(SpareThreads(1), 1u);
  EXPECT_GE(SpareThreads(8), 1u);
  EXPECT_LE(SpareThreads(8), 8u);
}

}  // namespace
}  // namespace prefixd
