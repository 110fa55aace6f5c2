// Tests with real processes: kill -9 in the middle of writing, the directory lock, and the
// start-up time with many records.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "store/disk_store.h"
#include "store/store_test_util.h"
#include "util/fault_env.h"

namespace prefixd::store {
namespace {

using testing::ExpectAllIntact;
using testing::MetaFor;
using testing::OpenStore;
using testing::PayloadPtr;
using testing::TempDir;

// The child: writes, reads and removes records until killed. Never returns.
[[noreturn]] void WriteForever(const std::string& dir, uint32_t first_seed) {
  auto store = OpenStore(dir, nullptr, 2 << 20);  // a small quota: evictions happen too
  if (!store.ok()) _exit(3);
  std::mt19937 rng(first_seed);
  for (uint32_t seed = first_seed;; ++seed) {
    (*store)->PutAsync(MetaFor(seed), PayloadPtr(seed, rng() % 30000));
    if (rng() % 4 == 0) (*store)->Get(MetaFor(seed - 1).key, RecordKind::kBlockRows);
    if (rng() % 16 == 0) (*store)->Remove(MetaFor(seed - 2).key, RecordKind::kBlockRows);
    if (rng() % 8 == 0) (*store)->Flush();
  }
}

TEST(DiskStoreProcess, KillNineWhileWritingLosesNothingPublished) {
  TempDir dir;
  std::mt19937 rng(42);
  size_t max_seen = 0;
  for (int iter = 0; iter < 6; ++iter) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) WriteForever(dir.path(), 1000u * static_cast<uint32_t>(iter + 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 250));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
    auto store = OpenStore(dir.path(), nullptr, 2 << 20);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Stats st = (*store)->GetStats();
    EXPECT_EQ(st.recovery.dropped_bad, 0u) << st.recovery.ToString();
    EXPECT_LE(st.bytes, 2u << 20);
    EXPECT_EQ(ExpectAllIntact(**store), st.records) << st.recovery.ToString();
    max_seen = std::max<size_t>(max_seen, st.records);
    std::printf("  iteration %d: %s\n", iter, st.recovery.ToString().c_str());
  }
  EXPECT_GT(max_seen, 0u) << "the children never published anything";
}

TEST(DiskStoreProcess, SecondOpenOfTheSameDirFailsWithAClearError) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_TRUE(store.ok());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto second = OpenStore(dir.path());
    std::string msg = second.ok() ? "opened" : second.status().ToString();
    ssize_t w = write(fds[1], msg.data(), msg.size());
    _exit(w < 0 ? 4 : second.ok() ? 1 : 0);
  }
  close(fds[1]);
  char buf[512] = {};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf), "IOError: cache dir " + dir.path() + " is in use by pid " +
                                  std::to_string(getpid()));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // Once the holder closes the store, another process can open it.
  store->reset();
  pid = fork();
  if (pid == 0) _exit(OpenStore(dir.path()).ok() ? 0 : 1);
  waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Prints the start-up time with many records (PREFIXD_STORE_BENCH_RECORDS; default 2000 to
// keep the suite fast, run with 10000 to measure). Records are 256 tokens + 1 KB payload.
// Timings are printed, not asserted.
TEST(DiskStoreProcess, StartupTimeWithManyRecords) {
  const char* env_n = std::getenv("PREFIXD_STORE_BENCH_RECORDS");
  const uint32_t n = env_n ? static_cast<uint32_t>(std::atoi(env_n)) : 2000;
  TempDir dir;
  FaultEnv fast;  // populate without real fsyncs; the timed opens use the POSIX Env
  {
    auto store = OpenStore(dir.path(), &fast);
    ASSERT_TRUE(store.ok());
    for (uint32_t i = 0; i < n; ++i) {
      while (!(*store)->PutAsync(MetaFor(i, 0, RecordKind::kBlockRows, 256), PayloadPtr(i, 1024))) {
        (*store)->Flush();
      }
    }
  }
  auto timed_open = [&](const char* what) {
    auto t0 = std::chrono::steady_clock::now();
    auto store = OpenStore(dir.path());
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(store.ok());
    Stats st = (*store)->GetStats();
    EXPECT_EQ(st.records, n);
    std::printf("  open with %u records, %s: %.1f ms (%s)\n", n, what, ms,
                st.recovery.ToString().c_str());
  };
  timed_open("index intact");
  timed_open("index intact, second time");
  std::remove((dir.path() + "/index.log").c_str());
  timed_open("index deleted (rebuilt from headers)");
  timed_open("after the rebuild");
}

}  // namespace
}  // namespace prefixd::store
