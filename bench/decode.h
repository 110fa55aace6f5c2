// Decode throughput: N concurrent streamed chat completions that each generate
// exactly max_tokens tokens ("ignore_eos": true) from a short prompt of their own, timed by the
// client.
//
// Per stream: decode tokens/s = (completion_tokens - 1) / (end of stream - TTFT); the first
// token belongs to the prefill. Per run of N streams: aggregate tokens/s = sum over the streams
// of (completion_tokens - 1) / (last end of stream - first TTFT). Each stream count runs
// `reps` times; the report keeps every run and the median of each number.
//
// Thread-safety: RunDecode starts one thread per stream, each with its own Endpoint.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/http_client.h"

namespace prefixd::bench {

struct DecodeOptions {
  std::vector<int> streams = {1, 2};  // concurrent stream counts, each measured in turn
  int max_tokens = 128;               // generated per stream (ignore_eos)
  int reps = 3;                       // runs per stream count
  int prompt_tokens = 64;             // each stream's prompt, approximately
  uint64_t seed = 1;
};

// What one stream measured.
struct DecodeStream {
  double ttft_ms = 0;           // from the common start to the first choice
  double done_ms = 0;           // from the common start to the end of the stream
  int64_t completion_tokens = 0;
  double server_predicted_ms = -1;  // timings.predicted_ms when reported
  // Speculative decoding, as llama-server reports it (timings.draft_n, draft_n_accepted); -1
  // when the server did not speculate.
  int64_t draft_n = -1;
  int64_t draft_n_accepted = -1;

  // (completion_tokens - 1) / (done - ttft) in tokens/s; 0 when undefined.
  double TokensPerSecond() const;
};

// Aggregate tokens/s of streams that ran together (see the file comment); 0 when undefined.
double AggregateTokensPerSecond(const std::vector<DecodeStream>& streams);

// The median of `v`; 0 when empty.
double Median(std::vector<double> v);

// Runs every stream count of `options` against `server` (started by the caller) and returns
// {"label", "max_tokens", "reps", "results": [{"streams", "tokens_per_s", "per_stream_tokens_per_s",
// "runs": [{"tokens_per_s", "streams": [{"ttft_ms", "done_ms", "completion_tokens", ...}]}]}]}.
// A stream that does not generate exactly max_tokens tokens is an error (the server ignored
// ignore_eos or max_tokens).
Result<nlohmann::json> RunDecode(ServerUnderTest& server, const DecodeOptions& options,
                                 const std::string& label);

}  // namespace prefixd::bench
