// The HTTP replay: sends a trace (bench/trace.h) to an OpenAI-compatible server, one streamed
// request after the other, and measures per request what the server's prompt cache reused,
// the time to first token seen by the client and the timings the server reports. docs/bench.md
// describes every number.
//
// How it measures, per request:
//   tokens     POST /apply-template {messages, tools}: prefixd answers with "tokens" (the exact
//              ids the chat route evaluates); otherwise the "prompt" text is tokenized with
//              POST /tokenize {content, add_special: true, parse_special: true}, as llama-server
//              tokenizes a chat prompt. Not timed.
//   reusable   the longest token prefix shared with any earlier prompt of the replay, capped at
//              prompt_tokens - 1.
//   request    POST /v1/chat/completions, stream: true, stream_options.include_usage: TTFT is the
//              time from sending to the first SSE event that carries a choice; cached tokens come
//              from usage.prompt_tokens_details.cached_tokens, else timings.cache_n; evaluated
//              tokens from timings.prompt_n, else prompt_tokens - cached; the server's prompt_ms,
//              restore_ms and queue_ms from "timings" when it sends them.
//   outside    ttft_ms - model_ms: the part of the TTFT the server did not spend evaluating the
//              prompt in the model (HTTP, template, tokenizing, queueing, cache lookup and
//              restore, captures, first-token sampling). model_ms = timings.prompt_eval_ms (time
//              inside llama_decode, prefixd) when reported, else prompt_ms - restore_ms (older
//              prefixd), else prompt_ms (llama-server: its restores and checkpoint saves count
//              as model time). -1 when the server reports no prompt_ms.
//
// Thread-safety: one replay per thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/http_client.h"
#include "bench/trace.h"

namespace prefixd::bench {

// One replayed request.
struct RequestResult {
  size_t index = 0;
  int session = 0;
  int turn = 0;
  uint32_t flags = 0;           // TraceFlag bits
  int64_t prompt = 0;           // prompt tokens (usage.prompt_tokens)
  int64_t reusable = -1;        // -1 when the token ids were not available
  int64_t cached = 0;
  int64_t evaluated = 0;
  int64_t completion = 0;
  double ttft_ms = 0;           // client: sent -> first SSE event with a choice
  double total_ms = 0;          // client: sent -> end of the stream
  double server_prompt_ms = -1; // timings.prompt_ms; -1 when not reported
  double restore_ms = -1;       // timings.restore_ms (prefixd); -1 when not reported
  double queue_ms = -1;         // timings.queue_ms (prefixd); -1 when not reported
  double prompt_eval_ms = -1;   // timings.prompt_eval_ms (prefixd); -1 when not reported
  int64_t prompt_chunks = -1;   // timings.prompt_chunks (prefixd: llama_decode calls of the
                                // prefill); -1 when not reported
  int64_t counted_calls = -1;     // prefill calls and their ubatches, counted in the server by
  int64_t counted_ubatches = -1;  // bench/decode_counter.cpp; -1 without --decode-log
  bool restarted = false;       // the server was restarted right before this request
  std::string output;           // the streamed answer (StreamStats::output)
  std::string answer_error;     // the server processed the prompt, then failed its answer: why

  // prompt_eval_ms when reported, else prompt_ms - max(restore_ms, 0); -1 when prompt_ms is
  // unknown.
  double ModelMs() const;
  // ttft_ms - ModelMs(); -1 when prompt_ms is unknown.
  double OutsideMs() const;
};

nlohmann::json ToJson(const RequestResult& r);

// The chat request body for one trace request. max_tokens <= 0 leaves out max_tokens and
// temperature (for /apply-template).
nlohmann::json ChatBody(const TraceRequest& t, const std::string& model, int max_tokens,
                        bool stream);

// The longest prefix `prompt` shares with any of `earlier`.
int64_t LongestSharedPrefix(const std::vector<std::vector<int64_t>>& earlier,
                            const std::vector<int64_t>& prompt);

// Fills the server-reported fields of `r` from a finished stream.
void ReadServerNumbers(const StreamStats& s, RequestResult* r);

// What a replay measured: a row per request completed (on an error the rows so far stay), and
// whether the server was restarted at a restart flag.
struct ReplayRun {
  std::vector<RequestResult> rows;
  bool restarted = false;
};

// Replays `trace` against `server` (started and warmed up by the caller), restarting it at a
// restart flag.
Status Replay(ServerUnderTest& server, const std::vector<TraceRequest>& trace, ReplayRun* run);

// Replays `trace` against two servers side by side, both running at once: each request goes to
// one, then to the other, the order alternating from request to request (a first on even
// requests), so that the noise of a shared machine hits both alike. Restart flags restart both.
Status ReplaySideBySide(ServerUnderTest& a, ServerUnderTest& b,
                        const std::vector<TraceRequest>& trace, ReplayRun* run_a,
                        ReplayRun* run_b);

// Replays `trace` against two servers that share a cache tier (docs/deployment.md): request i
// goes to `a` when i is even, else to `b`, as a load balancer without session affinity would
// send them. One run; `reusable` counts what either server saw before.
Status ReplayAlternating(ServerUnderTest& a, ServerUnderTest& b,
                         const std::vector<TraceRequest>& trace, ReplayRun* run);

// The results file: {"label", "url", "server_cmd", "trace", "restarted", "requests": [...],
// "totals": {...}, "from_restart": {...} | null}. `meta` gives label, url, server_cmd, trace.
nlohmann::json ResultsJson(const nlohmann::json& meta, const std::vector<RequestResult>& rows,
                           bool restarted);

// A Markdown table of one results file, and a one-line summary for stdout.
std::string SingleMarkdown(const nlohmann::json& results);
void PrintSummary(const nlohmann::json& results);

// --combine: two results files side by side (reuse, TTFT ratio, requests where B re-prefilled
// more than `reprefill_slack` tokens beyond its non-reusable part).
struct CombineOptions {
  std::string a_path, b_path;
  std::string out, md, tsv;  // "" skips that output
  std::string title;
  int64_t reprefill_slack = 256;
};
Status Combine(const CombineOptions& options);

// Small shared helpers of the reports.
Result<nlohmann::json> ReadJsonFile(const std::string& path);
Status WriteTextFile(const std::string& path, const std::string& text);
std::string Fixed(double v, int digits = 0);
std::string Pct(double ratio);
double SafeRatio(double a, double b);  // a / b, 0 when b <= 0

}  // namespace prefixd::bench
