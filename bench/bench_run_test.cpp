// Tests of a whole bench run (bench_run.h) that need no server: against a port nothing listens
// on, the run fails and still writes each server's results, saying what went wrong.
#include "bench/bench_run.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/replay.h"

namespace prefixd::bench {
namespace {

class BenchRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "prefixd-bench-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A server that is not there: nothing listens on port 1.
  static ServerOptions Nowhere(const std::string& label) {
    ServerOptions o;
    o.url = "http://127.0.0.1:1";
    o.label = label;
    o.warmup = false;
    o.start_timeout_s = 1;
    o.request_timeout_s = 1;
    return o;
  }
  static std::vector<TraceRequest> OneRequest() {
    TraceOptions o;
    o.n_sessions = 1;
    o.turns_per_session = 1;
    o.branch = false;
    o.restart = false;
    auto trace = GenerateTrace(o);
    EXPECT_TRUE(trace.ok()) << trace.status().ToString();
    return trace.ok() ? *trace : std::vector<TraceRequest>{};
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

TEST_F(BenchRunTest, FailedReplayStillWritesResultsWithTheError) {
  ReplayRunOptions o;
  o.a = {Nowhere("a"), Path("a.json"), Path("a.md")};
  o.trace_path = "trace.jsonl";
  Status st = RunReplay(o, OneRequest());
  EXPECT_FALSE(st.ok());
  auto r = ReadJsonFile(Path("a.json"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["label"], "a");
  EXPECT_EQ((*r)["trace"], "trace.jsonl");
  EXPECT_EQ((*r)["side_by_side"], false);
  EXPECT_EQ((*r)["error"], st.ToString());
  EXPECT_TRUE((*r)["requests"].empty());
  EXPECT_TRUE(std::filesystem::exists(Path("a.md")));
}

TEST_F(BenchRunTest, SideBySideWritesBothServersResults) {
  ReplayRunOptions o;
  o.a = {Nowhere("a"), Path("a.json"), ""};
  o.b = ReplayTarget{Nowhere("b"), Path("b.json"), ""};
  o.long_session = true;
  EXPECT_FALSE(RunReplay(o, OneRequest()).ok());
  for (const char* side : {"a", "b"}) {
    auto r = ReadJsonFile(Path(std::string(side) + ".json"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)["label"], side);
    EXPECT_EQ((*r)["side_by_side"], true);
    EXPECT_EQ((*r)["long_session"], true);
    EXPECT_TRUE(r->contains("error"));
  }
}

TEST_F(BenchRunTest, DecodeAgainstNoServerFailsAndWritesNothing) {
  DecodeOptions o;
  o.streams = {1};
  o.reps = 1;
  o.max_tokens = 2;
  EXPECT_FALSE(RunDecodeToFiles(Nowhere("a"), o, Path("d.json"), "").ok());
  EXPECT_FALSE(std::filesystem::exists(Path("d.json")));
}

}  // namespace
}  // namespace prefixd::bench
