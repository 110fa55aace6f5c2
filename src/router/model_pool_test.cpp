#include "router/model_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "server/request_log.h"

namespace prefixd::router {
namespace {

// A launcher whose "servers" are objects: a load takes `load_ms`, uses `memory[id]` bytes, and
// fails for the ids in `broken`. Every process it made can be made to end (a crash).
class FakeLauncher : public ModelLauncher {
 public:
  struct Proc : ModelProcess {
    Proc(FakeLauncher* l, std::string id, int p) : launcher(l), id(std::move(id)), p(p) {
      ++l->running;
    }
    ~Proc() override { --launcher->running; }
    int port() const override { return p; }
    bool Alive() override { return !launcher->crashed.load(); }
    uint64_t MemoryBytes() override { return launcher->memory.count(id) ? launcher->memory[id] : 100; }
    std::string ExitText() override { return "killed by signal Killed"; }
    int64_t n_ctx() const override { return launcher->n_ctx; }
    FakeLauncher* launcher;
    std::string id;
    int p;
  };

  Result<std::unique_ptr<ModelProcess>> Launch(const ModelSpec& spec) override {
    ++launches;
    ++launches_of[spec.id];
    std::this_thread::sleep_for(std::chrono::milliseconds(load_ms));
    if (spec.id == broken) return Status::Internal("model " + spec.id + " failed to load: bad");
    crashed = false;
    return std::unique_ptr<ModelProcess>(
        std::make_unique<Proc>(this, spec.id, next_port++));
  }

  std::atomic<int> launches{0};
  std::map<std::string, int> launches_of;  // written under the pool's single launch at a time
  std::atomic<int> running{0};
  std::atomic<bool> crashed{false};
  std::map<std::string, uint64_t> memory;  // what each model's server holds now
  std::string broken;
  int load_ms = 0;
  int next_port = 9000;
  int64_t n_ctx = 0;  // what each server says its context is
};

std::vector<ModelSpec> Specs(std::initializer_list<const char*> ids) {
  std::vector<ModelSpec> out;
  for (const char* id : ids) {
    ModelSpec s;
    s.id = id;
    s.path = std::string("/nonexistent/") + id + ".gguf";
    out.push_back(s);
  }
  return out;
}

ModelState StateOf(const ModelPool& pool, const std::string& id) {
  for (const ModelView& v : pool.List()) {
    if (v.id == id) return v.state;
  }
  return ModelState::kFailed;
}

class ModelPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { server::SetRequestLogEnabled(false); }
  FakeLauncher launcher;
};

TEST_F(ModelPoolTest, AServersContextIsKnownOnceLoadedAndKeptAfter) {
  launcher.n_ctx = 4096;
  ModelPool pool(Specs({"a"}), &launcher, {});
  EXPECT_EQ(pool.List()[0].n_ctx, 0);
  ASSERT_TRUE(pool.Load("a").ok());
  EXPECT_EQ(pool.List()[0].n_ctx, 4096);
  ASSERT_TRUE(pool.Unload("a").ok());
  EXPECT_EQ(pool.List()[0].state, ModelState::kUnloaded);
  EXPECT_EQ(pool.List()[0].n_ctx, 4096);
}

TEST_F(ModelPoolTest, ConcurrentFirstRequestsLoadOnce) {
  launcher.load_ms = 100;
  ModelPool pool(Specs({"a", "b"}), &launcher, {});
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto lease = pool.Acquire("a");
      if (lease.ok() && lease->port() == 9000) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(launcher.launches.load(), 1);
  EXPECT_EQ(pool.counters().loads, 1);
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kLoaded);
  EXPECT_EQ(StateOf(pool, "b"), ModelState::kUnloaded);
}

TEST_F(ModelPoolTest, AFailedLoadFailsItsWaitersOnlyAndIsTriedAgainLater) {
  launcher.load_ms = 100;
  launcher.broken = "bad";
  ModelPool pool(Specs({"good", "bad"}), &launcher, {});
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto lease = pool.Acquire("bad");
      if (!lease.ok() && lease.status().message().find("failed to load") != std::string::npos) {
        ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 4);
  EXPECT_EQ(launcher.launches_of["bad"], 1);  // the waiters took the one load's error
  EXPECT_EQ(StateOf(pool, "bad"), ModelState::kFailed);
  EXPECT_TRUE(pool.Acquire("good").ok());
  launcher.broken.clear();  // the file was fixed: the next request loads it
  EXPECT_TRUE(pool.Acquire("bad").ok());
  EXPECT_EQ(launcher.launches_of["bad"], 2);
}

TEST_F(ModelPoolTest, NamesResolveByIdAliasAndPattern) {
  std::vector<ModelSpec> specs = Specs({"big", "small"});
  specs[1].aliases = {"haiku", "claude-3-5-haiku-*"};
  ModelPool pool(specs, &launcher, {});
  EXPECT_EQ(*pool.Resolve("big"), "big");
  EXPECT_EQ(*pool.Resolve("haiku"), "small");
  EXPECT_EQ(*pool.Resolve("claude-3-5-haiku-20241022"), "small");
  Result<std::string> unknown = pool.Resolve("gpt-5");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Status::Code::kNotFound);
  EXPECT_NE(unknown.status().message().find("big, small"), std::string::npos);
}

TEST_F(ModelPoolTest, TheLeastRecentlyUsedIdleModelMakesRoom) {
  ModelPool pool(Specs({"a", "b", "c"}), &launcher, PoolOptions{2, 0, 0});
  ASSERT_TRUE(pool.Load("a").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(pool.Load("b").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(pool.Load("a").ok());  // a is now the more recent
  ASSERT_TRUE(pool.Load("c").ok());
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kLoaded);
  EXPECT_EQ(StateOf(pool, "b"), ModelState::kUnloaded);
  EXPECT_EQ(StateOf(pool, "c"), ModelState::kLoaded);
  EXPECT_EQ(pool.counters().evictions, 1);
  EXPECT_EQ(launcher.running.load(), 2);
}

TEST_F(ModelPoolTest, ABusyModelIsNeverUnloadedAndTheNextWaitsForIt) {
  PoolOptions o{1, 0, 0};
  o.wait_limit = std::chrono::milliseconds(200);
  ModelPool pool(Specs({"a", "b"}), &launcher, o);
  auto held = pool.Acquire("a");
  ASSERT_TRUE(held.ok());
  Status busy = pool.Unload("a");
  EXPECT_EQ(busy.code(), Status::Code::kAborted);
  EXPECT_NE(busy.message().find("1 request(s) in flight"), std::string::npos);
  auto no_room = pool.Acquire("b");  // a is busy for longer than the wait limit
  ASSERT_FALSE(no_room.ok());
  EXPECT_EQ(no_room.status().code(), Status::Code::kResourceExhausted);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    *held = ModelPool::Lease();
  });
  auto b = pool.Acquire("b");  // waits until a's request ends, then swaps
  release.join();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kUnloaded);
  EXPECT_TRUE(pool.Unload("a").ok());  // not loaded: nothing to do
}

TEST_F(ModelPoolTest, TheMemoryBudgetCountsMeasuredBytes) {
  // The fake files are missing (0 bytes): a model not loaded yet is estimated at the least
  // any server held beyond its file.
  launcher.memory = {{"a", 600}, {"b", 600}, {"c", 300}, {"huge", 5000}};
  ModelPool pool(Specs({"a", "b", "c", "huge"}), &launcher, PoolOptions{0, 1000, 0});
  auto loaded_bytes = [&] {
    uint64_t total = 0;
    for (const ModelView& v : pool.List()) {
      if (v.state == ModelState::kLoaded) total += v.memory_bytes;
    }
    return total;
  };
  ASSERT_TRUE(pool.Load("a").ok());
  ASSERT_TRUE(pool.Load("c").ok());  // estimated 600 beside a's 600: a makes room
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kUnloaded);
  ASSERT_TRUE(pool.Load("b").ok());  // estimated 300 now (c's): fits beside c
  EXPECT_EQ(loaded_bytes(), 900u);
  ASSERT_TRUE(pool.Load("a").ok());  // a counts its measured 600: c, then b make room
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kLoaded);
  EXPECT_EQ(loaded_bytes(), 600u);
  EXPECT_EQ(pool.counters().evictions, 3);
  launcher.memory["a"] = 1200;  // its RAM tier grew past the budget
  pool.Tick();
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kUnloaded);
  Status first = pool.Load("huge");  // estimated 300: it loads, and is measured at 5000...
  EXPECT_TRUE(first.ok());
  pool.Tick();  // ...over the budget: unloaded
  EXPECT_EQ(StateOf(pool, "huge"), ModelState::kUnloaded);
  Status again = pool.Load("huge");  // and refused from then on
  EXPECT_EQ(again.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(again.message().find("more than the models' memory budget"), std::string::npos);
}

TEST_F(ModelPoolTest, PinnedModelsLoadAtStartAndAreNotEvicted) {
  std::vector<ModelSpec> specs = Specs({"pin", "a"});
  specs[0].pinned = true;
  ModelPool pool(specs, &launcher, PoolOptions{1, 0, 0});
  pool.Start();
  EXPECT_EQ(StateOf(pool, "pin"), ModelState::kLoaded);
  Status st = pool.Load("a");
  EXPECT_EQ(st.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(st.message().find("beside the pinned models"), std::string::npos);
  EXPECT_EQ(StateOf(pool, "pin"), ModelState::kLoaded);
}

TEST_F(ModelPoolTest, IdleModelsPastTheirTtlAreUnloadedButNotBusyOnes) {
  std::vector<ModelSpec> specs = Specs({"a", "b"});
  specs[0].ttl_s = 1;
  specs[1].ttl_s = 1;
  ModelPool pool(specs, &launcher, {});
  ASSERT_TRUE(pool.Load("a").ok());
  auto busy = pool.Acquire("b");
  ASSERT_TRUE(busy.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  pool.Tick();
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kUnloaded);
  EXPECT_EQ(StateOf(pool, "b"), ModelState::kLoaded);
  EXPECT_EQ(pool.counters().idle_unloads, 1);
}

TEST_F(ModelPoolTest, ARequestsKeepAliveReplacesTheTtlUntilTheNextThatAsks) {
  std::vector<ModelSpec> specs = Specs({"a", "b"});
  specs[1].ttl_s = 1;
  ModelPool pool(specs, &launcher, {});
  {
    auto lease = pool.Acquire("a", KeepAlive{KeepAlive::Kind::kFor, std::chrono::milliseconds(0)});
    ASSERT_TRUE(lease.ok());
    pool.Tick();
    EXPECT_EQ(StateOf(pool, "a"), ModelState::kLoaded);  // busy
  }
  pool.Tick();  // keep_alive 0: unloaded once idle
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kUnloaded);
  ASSERT_TRUE(pool.Acquire("b", KeepAlive{KeepAlive::Kind::kForever, {}}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  pool.Tick();  // its ttl of 1 s is replaced by forever
  EXPECT_EQ(StateOf(pool, "b"), ModelState::kLoaded);
  EXPECT_EQ(pool.List()[1].ttl_s, -1);
  ASSERT_TRUE(pool.Acquire("b").ok());  // a request that does not ask keeps what was asked
  pool.Tick();
  EXPECT_EQ(StateOf(pool, "b"), ModelState::kLoaded);
}

TEST_F(ModelPoolTest, AServerThatEndedIsNoticedAndLoadedAgain) {
  ModelPool pool(Specs({"a"}), &launcher, {});
  ASSERT_TRUE(pool.Load("a").ok());
  launcher.crashed = true;
  pool.Tick();
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kUnloaded);
  EXPECT_EQ(pool.counters().crashes, 1);
  EXPECT_NE(pool.List()[0].last_error.find("killed by signal"), std::string::npos);
  auto again = pool.Acquire("a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(launcher.launches.load(), 2);
}

// A request the model's server left unanswered asks the pool whether that server ended: a crash
// found within the wait (the process is reaped a moment after a kill -9) is noticed and the
// model loads again; a server that still runs is not unloaded.
TEST_F(ModelPoolTest, AnUnansweredRequestNoticesAServerThatEndedWithinTheWait) {
  ModelPool pool(Specs({"a"}), &launcher, {});
  int port = 0;
  {
    auto first = pool.Acquire("a");
    ASSERT_TRUE(first.ok());
    port = first->port();
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(pool.NoticeEnd("a", port, std::chrono::milliseconds(50)));  // still runs
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kLoaded);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    launcher.crashed = true;
  });
  EXPECT_TRUE(pool.NoticeEnd("a", port, std::chrono::seconds(5)));
  killer.join();
  EXPECT_EQ(StateOf(pool, "a"), ModelState::kUnloaded);
  EXPECT_EQ(pool.counters().crashes, 1);
  auto again = pool.Acquire("a");
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->port(), port);
  // Another request that saw the old server fail finds it gone already.
  EXPECT_TRUE(pool.NoticeEnd("a", port, std::chrono::milliseconds(0)));
  EXPECT_EQ(launcher.launches.load(), 2);
}

}  // namespace
}  // namespace prefixd::router
