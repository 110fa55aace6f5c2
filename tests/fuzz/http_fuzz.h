// HTTP fuzzing of a running prefixd server (the real httplib server, over a fake backend in the
// unit test or `prefixd serve` on a tiny model in tests/fuzz/real_server.sh).
//
// MakeCase(seed, i) builds request i from (seed, i) alone, so any failure is reproduced by its
// two numbers whatever the thread count: valid requests to every route, mutated bodies (bit
// flips, cuts, splices), JSON edge cases (deep nesting, huge numbers, invalid UTF-8, wrong
// types), header chaos (wrong content types, long or odd headers, missing lengths), chunked
// bodies (valid and broken), connections cut mid-request, odd request lines and random bytes.
//
// CheckAnswer() states what every answer must be: a 2xx whose JSON (or SSE events) parses, or a
// 4xx / 503 whose body is the JSON error shape ({"error": {"message": ...}}), 503 with
// Retry-After. Any other status — a 5xx other than 503, a 1xx or 3xx — is a violation, as is
// silence after a request whose framing was correct.
//
// Only ever talks to the host and port it is given (127.0.0.1 in every test).
// Thread-safety: RunFuzz starts its own threads; the other functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace prefixd::fuzz {

struct FuzzCase {
  std::string kind;            // generator name, for reports
  std::string bytes;           // what is written to the socket
  bool expect_answer = true;   // the framing is correct: silence is a violation
  bool close_early = false;    // cut the connection right after writing (never read)
  bool head = false;           // a HEAD request: no body in the answer
  int trickle_ms = 0;          // > 0: written in pieces this far apart (a slow client)
};

struct FuzzOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  uint64_t seed = 1;
  size_t n_requests = 2000;
  double max_seconds = 40;     // stop early when this is spent
  size_t n_threads = 4;
  int answer_timeout_ms = 15000;
  std::string model;           // the served model id ("" -> requests name no model)
  std::string api_key;         // sent on most requests when not ""
  size_t max_messages = 400;   // the most messages a generated chat has
};

struct FuzzReport {
  size_t sent = 0;
  size_t answered = 0;
  std::map<int, size_t> by_status;
  std::map<std::string, size_t> by_kind;
  std::vector<std::string> violations;  // "case N (kind): why" — at most 20 kept
  size_t n_violations = 0;
  size_t n_slow = 0;                  // exchanges that took over a second
  std::vector<std::string> slow;      // "case N (kind) S s" — at most 10 kept
  double seconds = 0;

  std::string Summary() const;
};

FuzzCase MakeCase(const FuzzOptions& options, size_t index);

// The verdict on one raw HTTP answer ("" when the server said nothing): "" when it is allowed,
// else what is wrong.
std::string CheckAnswer(const FuzzCase& c, const std::string& raw_answer);

// Sends `c` on a fresh connection and reads the answer to EOF (or the timeout).
std::string Exchange(const FuzzOptions& options, const FuzzCase& c);

// Runs MakeCase(options, 0..n_requests) across n_threads threads.
FuzzReport RunFuzz(const FuzzOptions& options);

// True when GET /health answers 200 and a plain completion request answers 200 with JSON.
bool ServerStillServes(const FuzzOptions& options, std::string* why);

}  // namespace prefixd::fuzz
