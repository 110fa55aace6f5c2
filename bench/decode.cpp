#include "bench/decode.h"

#include <algorithm>
#include <thread>

#include "bench/trace.h"

namespace prefixd::bench {

using nlohmann::json;

double DecodeStream::TokensPerSecond() const {
  const double ms = done_ms - ttft_ms;
  if (completion_tokens < 2 || ms <= 0) return 0;
  return double(completion_tokens - 1) * 1000.0 / ms;
}

double AggregateTokensPerSecond(const std::vector<DecodeStream>& streams) {
  if (streams.empty()) return 0;
  double first = streams[0].ttft_ms, last = streams[0].done_ms;
  int64_t tokens = 0;
  for (const DecodeStream& s : streams) {
    first = std::min(first, s.ttft_ms);
    last = std::max(last, s.done_ms);
    tokens += std::max<int64_t>(s.completion_tokens - 1, 0);
  }
  return last > first ? double(tokens) * 1000.0 / (last - first) : 0;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

namespace {

json DecodeBody(const std::string& prompt, const DecodeOptions& o, const std::string& model) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", prompt}}})},
               {"max_tokens", o.max_tokens},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!model.empty()) body["model"] = model;
  return body;
}

// One stream, on its own connection; `start` is the common start of the run.
Status OneStream(const ServerOptions& so, const json& body, BenchClock::time_point start,
                 DecodeStream* out) {
  Endpoint ep(so.url, so.api_key, so.request_timeout_s);
  SseReader sse(start);
  PREFIXD_ASSIGN_OR_RETURN(int status,
                           ep.PostStream("/v1/chat/completions", body,
                                         [&](const char* d, size_t n) { return sse.Feed(d, n); }));
  out->done_ms = MillisBetween(start, BenchClock::now());
  const StreamStats& s = sse.stats();
  if (status != 200 || !s.error.is_null() || s.usage.is_null()) {
    return Status::IOError("decode stream: HTTP " + std::to_string(status) + ": " + s.raw_head);
  }
  out->ttft_ms = s.first_choice_ms.value_or(out->done_ms);
  out->completion_tokens = s.usage.value("completion_tokens", int64_t(0));
  if (s.timings.is_object() && s.timings.contains("predicted_ms")) {
    out->server_predicted_ms = s.timings["predicted_ms"].get<double>();
  }
  if (s.timings.is_object() && s.timings.contains("draft_n")) {
    out->draft_n = s.timings["draft_n"].get<int64_t>();
    out->draft_n_accepted = s.timings.value("draft_n_accepted", int64_t(0));
  }
  return Status::OK();
}

// n streams at once; every stream gets a prompt of its own (no shared prefix).
Result<std::vector<DecodeStream>> OneRun(ServerUnderTest& server, const DecodeOptions& o, int n,
                                         uint64_t seed) {
  std::vector<DecodeStream> streams(static_cast<size_t>(n));
  std::vector<Status> status(static_cast<size_t>(n), Status::OK());
  std::vector<std::thread> threads;
  const auto start = BenchClock::now();
  for (int i = 0; i < n; ++i) {
    const json body =
        DecodeBody(WordSalad(seed + uint64_t(i), o.prompt_tokens), o, server.options().model);
    threads.emplace_back([&, i, body] {
      status[size_t(i)] = OneStream(server.options(), body, start, &streams[size_t(i)]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    PREFIXD_RETURN_IF_ERROR(status[size_t(i)]);
    if (streams[size_t(i)].completion_tokens != o.max_tokens) {
      return Status::IOError("decode stream generated " +
                             std::to_string(streams[size_t(i)].completion_tokens) +
                             " tokens, not max_tokens " + std::to_string(o.max_tokens) +
                             " (is ignore_eos supported?)");
    }
  }
  return streams;
}

json StreamJson(const DecodeStream& s) {
  return {{"ttft_ms", s.ttft_ms},
          {"done_ms", s.done_ms},
          {"completion_tokens", s.completion_tokens},
          {"server_predicted_ms", s.server_predicted_ms},
          {"draft_n", s.draft_n},
          {"draft_n_accepted", s.draft_n_accepted},
          {"tokens_per_s", s.TokensPerSecond()}};
}

Result<json> OneStreamCount(ServerUnderTest& server, const DecodeOptions& o, int n) {
  json runs = json::array();
  std::vector<double> aggregate, per_stream;
  for (int rep = 0; rep < o.reps; ++rep) {
    const uint64_t seed = o.seed * 1000003u + uint64_t(n) * 1000u + uint64_t(rep) * 16u;
    PREFIXD_ASSIGN_OR_RETURN(auto streams, OneRun(server, o, n, seed));
    json run = {{"tokens_per_s", AggregateTokensPerSecond(streams)}, {"streams", json::array()}};
    double sum = 0;
    for (const DecodeStream& s : streams) {
      run["streams"].push_back(StreamJson(s));
      sum += s.TokensPerSecond();
    }
    aggregate.push_back(run["tokens_per_s"].get<double>());
    per_stream.push_back(sum / double(n));
    runs.push_back(run);
  }
  Progress("decode %s: %d stream(s): %.1f tokens/s in all, %.1f per stream (median of %d)",
           server.options().url.c_str(), n, Median(aggregate), Median(per_stream), o.reps);
  return json{{"streams", n},
              {"tokens_per_s", Median(aggregate)},
              {"per_stream_tokens_per_s", Median(per_stream)},
              {"runs", runs}};
}

}  // namespace

Result<json> RunDecode(ServerUnderTest& server, const DecodeOptions& o, const std::string& label) {
  if (o.streams.empty() || o.max_tokens < 2 || o.reps < 1 || o.prompt_tokens < 1) {
    return Status::InvalidArgument("decode: streams, max_tokens >= 2, reps, prompt_tokens");
  }
  json results = json::array();
  for (int n : o.streams) {
    if (n < 1) return Status::InvalidArgument("decode: a stream count must be >= 1");
    PREFIXD_ASSIGN_OR_RETURN(json r, OneStreamCount(server, o, n));
    results.push_back(std::move(r));
  }
  return json{{"label", label},
              {"max_tokens", o.max_tokens},
              {"reps", o.reps},
              {"results", results}};
}

}  // namespace prefixd::bench
