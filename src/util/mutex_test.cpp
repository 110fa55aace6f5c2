#include "util/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace prefixd {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Whether another thread could take `mu` now.
bool FreeForOthers(Mutex& mu) {
  bool took = false;
  std::thread t([&] {
    if (mu.try_lock()) {
      took = true;
      mu.unlock();
    }
  });
  t.join();
  return took;
}

TEST(MutexTest, LockUnlockAndTryLock) {
  Mutex mu;
  mu.lock();
  EXPECT_FALSE(FreeForOthers(mu));
  mu.unlock();
  EXPECT_TRUE(FreeForOthers(mu));
  if (!mu.try_lock()) {
    ADD_FAILURE() << "try_lock failed on a free mutex";
    return;
  }
  EXPECT_FALSE(FreeForOthers(mu));
  mu.unlock();
}

TEST(MutexTest, MutexLockHoldsForItsScopeAndCanLetGoForAWhile) {
  Mutex mu;
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(FreeForOthers(mu));
    lock.Unlock();
    EXPECT_TRUE(FreeForOthers(mu));
    lock.Lock();
    EXPECT_FALSE(FreeForOthers(mu));
  }
  EXPECT_TRUE(FreeForOthers(mu));
  {
    MutexLock lock(&mu);
    lock.Unlock();
  }  // not held at the end: the destructor does not unlock again
  EXPECT_TRUE(FreeForOthers(mu));
}

TEST(MutexTest, MutexLockAdoptsATryLock) {
  Mutex mu;
  if (mu.try_lock()) {
    MutexLock lock(&mu, std::adopt_lock);
    EXPECT_FALSE(FreeForOthers(mu));
  }
  EXPECT_TRUE(FreeForOthers(mu));
}

// Two threads hand a counter back and forth: each waits for its turn, bumps it, and wakes the
// other. Every bump happens exactly on its thread's turn.
TEST(CondVarTest, HandsOffBetweenTwoThreads) {
  constexpr int kRounds = 200;
  Mutex mu;
  CondVar cv;
  int turn = 0;  // even: the main thread's turn, odd: the helper's
  int helper_bumps = 0;
  std::thread helper([&] {
    for (int i = 0; i < kRounds; ++i) {
      MutexLock lock(&mu);
      while (turn % 2 == 0) cv.Wait(lock);
      ++turn;
      ++helper_bumps;
      cv.notify_all();
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    MutexLock lock(&mu);
    while (turn % 2 == 1) cv.Wait(lock);
    ++turn;
    cv.notify_all();
  }
  helper.join();
  EXPECT_EQ(turn, 2 * kRounds);
  EXPECT_EQ(helper_bumps, kRounds);
}

TEST(CondVarTest, WaitForTimesOutWithTheLockHeld) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const auto t0 = steady_clock::now();
  EXPECT_FALSE(cv.WaitFor(lock, milliseconds(30)));
  EXPECT_GE(steady_clock::now() - t0, milliseconds(30));
  EXPECT_FALSE(FreeForOthers(mu));  // taken again before WaitFor returned
  EXPECT_FALSE(cv.WaitUntil(lock, steady_clock::now() - milliseconds(1)));  // passed already
}

TEST(CondVarTest, WaitForWakesOnNotify) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread t([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.notify_one();
  });
  {
    MutexLock lock(&mu);
    while (!ready && cv.WaitFor(lock, std::chrono::seconds(60))) {
    }
    EXPECT_TRUE(ready);  // woken by the notify, not by the timeout
  }
  t.join();
}

}  // namespace
}  // namespace prefixd
