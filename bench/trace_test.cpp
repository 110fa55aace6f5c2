#include "bench/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace prefixd::bench {
namespace {

using nlohmann::json;

std::vector<TraceRequest> Make(const TraceOptions& o) {
  auto t = GenerateTrace(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : std::vector<TraceRequest>{};
}

bool SameRequests(const std::vector<TraceRequest>& a, const std::vector<TraceRequest>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].session != b[i].session || a[i].turn != b[i].turn ||
        a[i].messages_json != b[i].messages_json || a[i].tools_json != b[i].tools_json ||
        a[i].max_tokens != b[i].max_tokens || a[i].flags != b[i].flags) {
      return false;
    }
  }
  return true;
}

TEST(TraceTest, SameSeedSameTraceOtherSeedOtherTrace) {
  TraceOptions o;
  EXPECT_TRUE(SameRequests(Make(o), Make(o)));
  TraceOptions other = o;
  other.seed = 2;
  EXPECT_FALSE(SameRequests(Make(o), Make(other)));
}

TEST(TraceTest, ShapeHasEveryFlagAndAllSessions) {
  TraceOptions o;  // 3 sessions x 3 turns, branch, restart
  const auto trace = Make(o);
  ASSERT_EQ(trace.size(), size_t(3 * 3 + 1));
  uint32_t all = 0;
  std::vector<int> per_session(3, 0);
  for (const auto& r : trace) {
    all |= r.flags;
    ++per_session[size_t(r.session)];
    EXPECT_FALSE(r.tools_json.empty());
  }
  EXPECT_EQ(all, kTraceBranch | kTraceReturn | kTraceRestart);
  EXPECT_EQ(per_session, (std::vector<int>{4, 3, 3}));
  // The returning session (the last) runs its remaining turns at the end.
  EXPECT_EQ(trace.back().session, 2);
  EXPECT_EQ(trace[trace.size() - 2].flags, uint32_t(kTraceReturn));
}

TEST(TraceTest, SessionGrowsAndKeepsItsHistory) {
  const auto trace = Make(TraceOptions{});
  std::string prev;
  for (const auto& r : trace) {
    if (r.session != 1) continue;  // text-style tool calls, results as user messages
    const json msgs = json::parse(r.messages_json);
    EXPECT_EQ(msgs[0]["role"], "system");
    const std::string last_role = msgs.back()["role"];
    EXPECT_TRUE(last_role == "user" || last_role == "tool");
    const std::string dumped = msgs.dump();
    if (!prev.empty()) {
      EXPECT_EQ(dumped.compare(0, prev.size() - 1, prev, 0, prev.size() - 1), 0)
          << "a later request must extend the earlier one";
    }
    prev = dumped;
  }
}

TEST(TraceTest, AssistantTurnsCarryThinkAndToolCalls) {
  const auto trace = Make(TraceOptions{});
  bool think = false, structured_call = false, text_call = false, tool_msg = false;
  for (const auto& r : trace) {
    for (const json& m : json::parse(r.messages_json)) {
      const std::string content = m.value("content", "");
      if (m["role"] == "assistant" && content.rfind("<think>\n", 0) == 0) think = true;
      if (m.contains("tool_calls")) structured_call = true;
      if (content.find("<tool_call>") != std::string::npos) text_call = true;
      if (m["role"] == "tool") tool_msg = true;
    }
  }
  EXPECT_TRUE(think && structured_call && text_call && tool_msg);
}

TEST(TraceTest, BranchEditsTheLastUserMessage) {
  const auto trace = Make(TraceOptions{});
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!(trace[i].flags & kTraceBranch)) continue;
    const json branch = json::parse(trace[i].messages_json);
    const json orig = json::parse(trace[i - 1].messages_json);
    EXPECT_EQ(trace[i - 1].session, trace[i].session);
    EXPECT_EQ(branch.back()["role"], "user");
    EXPECT_NE(branch.back()["content"].get<std::string>().find("Edited: "), std::string::npos);
    EXPECT_EQ(branch[0], orig[0]);
    return;
  }
  FAIL() << "no branch request";
}

TEST(TraceTest, SizesFollowTheOptions) {
  TraceOptions small, big;
  big.system_tokens = 6000;
  big.tool_tokens = 800;
  const auto a = Make(small), b = Make(big);
  EXPECT_GT(b.back().messages_json.size(), 3 * a.back().messages_json.size());
  EXPECT_GT(b[0].tools_json.size(), a[0].tools_json.size() * 3 / 2);
}

TEST(TraceTest, RejectsBadOptions) {
  TraceOptions o;
  o.n_sessions = 0;
  EXPECT_FALSE(GenerateTrace(o).ok());
}

TEST(TraceTest, JsonlRoundTrip) {
  const auto trace = Make(TraceOptions{});
  const std::string path = testing::TempDir() + "trace_test_" + std::to_string(getpid()) + ".jsonl";
  ASSERT_TRUE(WriteTraceJsonl(path, trace, "m").ok());
  auto back = ReadTraceJsonl(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SameRequests(trace, *back));
  const json line = json::parse(TraceRequestToJsonLine(trace[0], 0, "m"));
  EXPECT_EQ(line["model"], "m");
  EXPECT_EQ(line["prefixd_trace"]["session"], 0);
  std::remove(path.c_str());
}

TEST(TraceTest, JsonlReaderNamesTheBadLine) {
  const std::string path = testing::TempDir() + "trace_bad_" + std::to_string(getpid()) + ".jsonl";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("{\"messages\": []}\nnot json\n", f);
  std::fclose(f);
  auto r = ReadTraceJsonl(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":2"), std::string::npos) << r.status().message();
  std::remove(path.c_str());
}

std::vector<TraceRequest> MakeLong(const LongSessionOptions& o) {
  auto t = GenerateLongSession(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : std::vector<TraceRequest>{};
}

LongSessionOptions SmallLong() {
  LongSessionOptions o;
  o.max_context_tokens = 16000;  // 1 + (16000 - 8 - 4000) / 1500 = 8 requests
  return o;
}

TEST(LongSessionTest, SameSeedSameSessionOtherSeedOtherSession) {
  EXPECT_TRUE(SameRequests(MakeLong(SmallLong()), MakeLong(SmallLong())));
  LongSessionOptions other = SmallLong();
  other.seed = 7;
  EXPECT_FALSE(SameRequests(MakeLong(SmallLong()), MakeLong(other)));
}

TEST(LongSessionTest, RequestCountFollowsTheContext) {
  EXPECT_EQ(LongSessionRequests(SmallLong()), 8);
  EXPECT_EQ(MakeLong(SmallLong()).size(), size_t(8));
  LongSessionOptions big;  // 64K: 1 + (65536 - 8 - 4000) / 1500
  EXPECT_EQ(LongSessionRequests(big), 42);
  big.max_context_tokens = 131072;
  EXPECT_EQ(LongSessionRequests(big), 85);
}

TEST(LongSessionTest, OneSessionThatOnlyAppendsMessages) {
  const auto trace = MakeLong(SmallLong());
  json prev = json::array();
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].session, 0);
    EXPECT_EQ(trace[i].turn, int(i));
    EXPECT_EQ(trace[i].flags, 0u);
    const json msgs = json::parse(trace[i].messages_json);
    ASSERT_GT(msgs.size(), prev.size());
    for (size_t k = 0; k < prev.size(); ++k) EXPECT_EQ(msgs[k], prev[k]) << i << " " << k;
    EXPECT_EQ(msgs.back()["role"], i == 0 ? "user" : "tool");
    prev = msgs;
  }
}

TEST(LongSessionTest, FourToolsCalledWithToolCallsAndReasoning) {
  const auto trace = MakeLong(SmallLong());
  EXPECT_EQ(json::parse(trace[0].tools_json).size(), size_t(4));
  int calls = 0, results = 0, think = 0, users = 0;
  for (const json& m : json::parse(trace.back().messages_json)) {
    if (m["role"] == "user") ++users;
    if (m["role"] == "tool") ++results;
    if (m["role"] != "assistant") continue;
    if (m.value("content", "").rfind("<think>\n", 0) == 0) ++think;
    if (m.contains("tool_calls")) ++calls;
  }
  EXPECT_EQ(calls, 7);  // one per request before the last; the first user step follows request 7
  EXPECT_EQ(results, 7);
  EXPECT_EQ(think, 7);
  EXPECT_EQ(users, 1);
}

TEST(LongSessionTest, NewUserMessageEveryUserEveryRequests) {
  LongSessionOptions o = SmallLong();
  o.user_every = 3;
  const auto trace = MakeLong(o);
  auto users = [](const TraceRequest& r) {
    int n = 0;
    for (const json& m : json::parse(r.messages_json)) n += m["role"] == "user";
    return n;
  };
  auto last_role = [](const TraceRequest& r) {
    return json::parse(r.messages_json).back()["role"].get<std::string>();
  };
  // After requests 2 and 5 the history gains a final answer and a new user message.
  EXPECT_EQ(users(trace[2]), 1);
  EXPECT_EQ(users(trace[3]), 2);
  EXPECT_EQ(last_role(trace[3]), "user");
  EXPECT_EQ(last_role(trace[4]), "tool");
  EXPECT_EQ(users(trace[6]), 3);
  EXPECT_EQ(last_role(trace[6]), "user");
}

TEST(LongSessionTest, GrowsEvenly) {
  const auto trace = MakeLong(SmallLong());
  for (size_t i = 1; i < trace.size(); ++i) {
    const double grew = double(trace[i].messages_json.size()) -
                        double(trace[i - 1].messages_json.size());
    const double first = double(trace[1].messages_json.size() - trace[0].messages_json.size());
    EXPECT_GT(grew, 0.7 * first) << i;
    EXPECT_LT(grew, 1.3 * first) << i;
  }
  LongSessionOptions bigger = SmallLong();
  bigger.step_tokens = 3000;
  const auto b = MakeLong(bigger);
  EXPECT_GT(b[2].messages_json.size() - b[1].messages_json.size(),
            3 * (trace[2].messages_json.size() - trace[1].messages_json.size()) / 2);
}

TEST(LongSessionTest, RejectsBadOptions) {
  LongSessionOptions o;
  o.n_tools = 7;
  EXPECT_FALSE(GenerateLongSession(o).ok());
  EXPECT_EQ(LongSessionRequests(o), 0);
  o = LongSessionOptions{};
  o.max_context_tokens = 1000;
  EXPECT_FALSE(GenerateLongSession(o).ok());
}

}  // namespace
}  // namespace prefixd::bench
