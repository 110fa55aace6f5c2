// Tests of the bench's measuring and reporting code that need no server: the SSE reader, the
// numbers read from a stream, the outside-model time, decode throughput and the long-session
// report.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "bench/decode.h"
#include "bench/decode_log.h"
#include "bench/long_session.h"
#include "bench/replay.h"

namespace prefixd::bench {
namespace {

using nlohmann::json;

TEST(DecodeLogTest, CountsThePrefillCallsAfterTheMarkAndNotTheDecodeSteps) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("prefixd-decode-log-" + std::to_string(getpid())))
          .string();
  std::filesystem::remove(path);
  EXPECT_EQ(DecodeLogMark(path), 0);
  { std::ofstream(path) << "2048 4 0\n1 1 1\n"; }  // an earlier request
  const int64_t mark = DecodeLogMark(path);
  EXPECT_GT(mark, 0);
  // A prefill of 1,300 tokens in calls of 1,024 (2 ubatches), 1 (no output: a cut) and 275
  // (its last row's output), then three decode steps.
  { std::ofstream(path, std::ios::app) << "1024 2 0\n1 1 0\n275 1 1\n1 1 1\n1 1 1\n1 1 1\n"; }
  const PrefillCount c = CountPrefill(path, mark);
  EXPECT_EQ(c.calls, 3);
  EXPECT_EQ(c.ubatches, 4);
  std::filesystem::remove(path);
}

TEST(SseReaderTest, ReadsChoicesUsageAndTimingsAcrossChunkBoundaries) {
  SseReader r(BenchClock::now());
  const std::string body =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"}}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2},"
      "\"timings\":{\"prompt_ms\":5.5}}\n\ndata: [DONE]\n\n";
  for (size_t i = 0; i < body.size(); i += 7) r.Feed(body.data() + i, std::min<size_t>(7, body.size() - i));
  const StreamStats& s = r.stats();
  ASSERT_TRUE(s.first_choice_ms.has_value());
  ASSERT_TRUE(s.first_content_ms.has_value());
  EXPECT_LE(*s.first_choice_ms, *s.first_content_ms);
  EXPECT_EQ(s.content_events, 2);
  EXPECT_EQ(s.output, "Hi there");
  EXPECT_EQ(s.usage["prompt_tokens"], 10);
  EXPECT_EQ(s.timings["prompt_ms"], 5.5);
  EXPECT_TRUE(s.error.is_null());
}

TEST(ReplayTest, ServerNumbersFromPrefixdAndLlamaServerTimings) {
  StreamStats s;
  s.usage = {{"prompt_tokens", 1000}, {"completion_tokens", 8},
             {"prompt_tokens_details", {{"cached_tokens", 900}}}};
  s.timings = {{"prompt_n", 100}, {"prompt_ms", 250.0}, {"restore_ms", 20.0}, {"queue_ms", 0.5}};
  RequestResult m;
  m.ttft_ms = 300;
  ReadServerNumbers(s, &m);
  EXPECT_EQ(m.prompt, 1000);
  EXPECT_EQ(m.cached, 900);
  EXPECT_EQ(m.evaluated, 100);
  EXPECT_DOUBLE_EQ(m.ModelMs(), 230);    // the restore is not model time
  EXPECT_DOUBLE_EQ(m.OutsideMs(), 70);   // 300 - 230

  StreamStats e = s;  // prefixd with prompt_eval_ms: the model time itself
  e.timings["prompt_eval_ms"] = 200.0;
  RequestResult p;
  p.ttft_ms = 300;
  ReadServerNumbers(e, &p);
  EXPECT_DOUBLE_EQ(p.ModelMs(), 200);
  EXPECT_DOUBLE_EQ(p.OutsideMs(), 100);

  StreamStats l;  // llama-server: cache_n in timings, no restore_ms / queue_ms
  l.usage = {{"prompt_tokens", 1000}, {"completion_tokens", 8}};
  l.timings = {{"cache_n", 512}, {"prompt_n", 488}, {"prompt_ms", 400.0}};
  RequestResult k;
  k.ttft_ms = 410;
  ReadServerNumbers(l, &k);
  EXPECT_EQ(k.cached, 512);
  EXPECT_EQ(k.restore_ms, -1);
  EXPECT_DOUBLE_EQ(k.OutsideMs(), 10);

  // llama-server's chat parser rejected the answer: no usage, only the first chunk's timings
  // (timings_per_token).
  StreamStats rejected;
  rejected.timings = {{"cache_n", 100}, {"prompt_n", 338}, {"prompt_ms", 50.0}};
  rejected.error = {{"code", 500}, {"message", "does not match the expected peg-native format"}};
  RequestResult r;
  ReadServerNumbers(rejected, &r);
  EXPECT_EQ(r.prompt, 438);
  EXPECT_EQ(r.cached, 100);
  EXPECT_EQ(r.evaluated, 338);

  RequestResult none;  // no timings at all
  none.ttft_ms = 5;
  ReadServerNumbers(StreamStats{}, &none);
  EXPECT_EQ(none.OutsideMs(), -1);
  EXPECT_EQ(ToJson(none)["outside_ms"], -1);
}

TEST(ReplayTest, LongestSharedPrefix) {
  const std::vector<std::vector<int64_t>> earlier = {{1, 2, 3, 4}, {1, 2, 9}};
  EXPECT_EQ(LongestSharedPrefix(earlier, {1, 2, 3, 7}), 3);
  EXPECT_EQ(LongestSharedPrefix(earlier, {1, 2, 9, 9}), 3);
  EXPECT_EQ(LongestSharedPrefix(earlier, {5}), 0);
  EXPECT_EQ(LongestSharedPrefix({}, {1}), 0);
}

TEST(DecodeTest, TokensPerSecond) {
  DecodeStream a{100, 1100, 129, -1};  // 128 tokens after the first in 1 s
  EXPECT_DOUBLE_EQ(a.TokensPerSecond(), 128);
  DecodeStream b{200, 1200, 129, -1};
  // Two streams: 256 tokens from the first TTFT (100) to the last end (1200).
  EXPECT_NEAR(AggregateTokensPerSecond({a, b}), 256 / 1.1, 1e-9);
  EXPECT_EQ(DecodeStream{}.TokensPerSecond(), 0);
  EXPECT_EQ(AggregateTokensPerSecond({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 2, 3}), 2.5);
  EXPECT_EQ(Median({}), 0);
}

// A results file of a long session with prompts of 4K, 8K, ... tokens.
json FakeRun(const std::string& label, double ttft_scale, int n) {
  std::vector<RequestResult> rows;
  for (int i = 0; i < n; ++i) {
    RequestResult m;
    m.index = size_t(i);
    m.turn = i;
    m.prompt = 4096 * (i + 1);
    m.reusable = i == 0 ? 0 : 4096 * i;
    m.cached = m.reusable;
    m.evaluated = m.prompt - m.cached;
    m.ttft_ms = ttft_scale * double(i + 1);
    m.total_ms = m.ttft_ms + 50;
    m.server_prompt_ms = m.ttft_ms - 10;
    rows.push_back(m);
  }
  return ResultsJson({{"label", label}}, rows, false);
}

TEST(LongSessionReportTest, TotalsRatioAndMilestones) {
  const json a = FakeRun("prefixd", 100, 16), b = FakeRun("llama-server", 200, 16);
  const json decode = {{"label", "prefixd"}, {"max_tokens", 128}, {"reps", 3},
                       {"results", {{{"streams", 1}, {"tokens_per_s", 50.0},
                                     {"per_stream_tokens_per_s", 50.0}}}}};
  auto r = LongSessionReport(a, b, {decode}, "t");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const json& rep = *r;
  // wall: sum of (100 (i+1) + 50) over 16 requests = 100 * 136 + 800.
  EXPECT_DOUBLE_EQ(rep["a"]["wall_ms"].get<double>(), 14400);
  EXPECT_DOUBLE_EQ(rep["b"]["wall_ms"].get<double>(), 28000);
  EXPECT_NEAR(rep["wall_ratio_a_over_b"].get<double>(), 14400.0 / 28000, 1e-12);
  EXPECT_DOUBLE_EQ(rep["a"]["outside_ms_total"].get<double>(), 160);  // 10 ms each
  // Prompts run to 64K: milestones 8K, 16K, 32K and 64K, not 128K.
  ASSERT_EQ(rep["milestones"].size(), size_t(4));
  EXPECT_EQ(rep["milestones"][1]["context"], 16384);
  EXPECT_EQ(rep["milestones"][1]["index"], 3);
  EXPECT_EQ(rep["milestones"][3]["prompt_tokens"], 65536);
  const std::string md = LongSessionMarkdown(rep);
  EXPECT_NE(md.find("Session wall ratio prefixd / llama-server: **0.514**"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| prefixd | 1 | 50.0 | 50.0 |"), std::string::npos) << md;
  const std::string tsv = LongSessionTsv(rep);
  EXPECT_EQ(std::count(tsv.begin(), tsv.end(), '\n'), 17);  // header + 16 requests
}

TEST(LongSessionReportTest, RejectsRunsOfDifferentLengths) {
  EXPECT_FALSE(LongSessionReport(FakeRun("a", 1, 3), FakeRun("b", 1, 4), {}, "").ok());
  EXPECT_FALSE(LongSessionReport(json::object(), FakeRun("b", 1, 4), {}, "").ok());
}

}  // namespace
}  // namespace prefixd::bench
