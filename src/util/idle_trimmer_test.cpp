#include "util/idle_trimmer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace prefixd {
namespace {

using std::chrono::milliseconds;

// Waits (bounded) until `done` holds.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 400 && !done(); ++i) std::this_thread::sleep_for(milliseconds(5));
  return done();
}

struct Fake {
  std::atomic<uint64_t> activity{0};
  std::atomic<bool> busy{false};
  std::atomic<int> trims{0};
  IdleTrimmer::Options Options() {
    IdleTrimmer::Options o;
    o.poll = milliseconds(10);
    o.activity = [this] { return activity.load(); };
    o.busy = [this] { return busy.load(); };
    o.trim = [this] {
      ++trims;
      return uint64_t(1000);
    };
    return o;
  }
};

TEST(IdleTrimmer, TrimsOncePerIdlePeriodAfterWork) {
  Fake f;
  IdleTrimmer t(f.Options());
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(f.trims, 0) << "no work yet: nothing to give back";
  f.activity = 1;
  ASSERT_TRUE(Eventually([&] { return f.trims == 1; }));
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(f.trims, 1) << "once per idle period";
  f.activity = 2;
  ASSERT_TRUE(Eventually([&] { return f.trims == 2; }));
  EXPECT_EQ(t.trims(), 2u);
  EXPECT_EQ(t.trimmed_bytes(), 2000u);
}

TEST(IdleTrimmer, WaitsWhileBusy) {
  Fake f;
  IdleTrimmer t(f.Options());
  f.busy = true;
  f.activity = 1;
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(f.trims, 0) << "a request is running";
  f.busy = false;
  ASSERT_TRUE(Eventually([&] { return f.trims == 1; }));
}

}  // namespace
}  // namespace prefixd
