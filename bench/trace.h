// Agent traces: seeded, deterministic sequences of OpenAI chat requests shaped like a coding
// agent's traffic, for the benchmarks (the in-process engine bench and the HTTP bench).
//
// A trace has one large system prompt with tool schemas shared by every session, and several
// sessions that each grow a conversation turn by turn: assistant tool calls (as OpenAI
// "tool_calls" or as <tool_call> text), tool results (as "tool" messages or as user messages
// holding <tool_response> blocks) with file contents or command output, and assistant turns
// that open with <think>...</think> reasoning, which Qwen3-style templates strip from turns
// before the last user message. Sessions are interleaved round-robin; one session leaves after
// its first turn and returns after the others have finished (a "return"); one request resends a
// session's last user message edited (a "branch"); a "restart" flag sits on a request in the
// middle (the server, or the in-process Engine, is restarted on the same cache before it).
//
// The assistant turns of the history are fixed text from the generator, never what a model
// answered, so a trace is a pure function of its TraceOptions: the same options give the same
// requests byte for byte, on any platform.
//
// Text is English-like word salad from a fixed word list, so a BPE tokenizer compresses it as it
// would ordinary prose and code. Sizes are given in approximate tokens; the real count depends
// on the tokenizer (the bench prints it).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace prefixd::bench {

// Tokens generated per request of a generated trace or long session: few, the bench measures
// the prompt side. The default of `prefixd bench` and prefixd_engine_bench too.
inline constexpr int kTraceMaxTokens = 8;

// The defaults are those of `prefixd bench` and prefixd_engine_bench (their flags start from
// TraceOptions{}): sized for a few minutes on 2 CPU cores with a "small" test model.
struct TraceOptions {
  uint64_t seed = 1;
  int n_sessions = 3;
  int turns_per_session = 3;   // requests per session (not counting the branch)
  int system_tokens = 1000;    // system text plus tool schemas, approximately
  int tool_tokens = 150;       // one tool result (file contents, command output), approximately
  int user_tokens = 40;        // one user message, approximately
  int think_tokens = 60;       // the reasoning of one assistant turn, approximately
  int max_tokens = kTraceMaxTokens;  // max_tokens of every request
  bool branch = true;          // add a branch request (an edited last user message)
  bool restart = true;         // put a restart flag on a request in the middle
};

// Flags of one request. A restart applies before the request is sent.
enum TraceFlag : uint32_t {
  kTraceBranch = 1u << 0,   // the session's last user message, edited and resent
  kTraceReturn = 1u << 1,   // the session's first request after the other sessions ran
  kTraceRestart = 1u << 2,  // restart the server / Engine (same cache) before this request
};

struct TraceRequest {
  int session = 0;            // 0-based session id
  int turn = 0;               // 0-based turn within the session (a branch repeats its turn)
  std::string messages_json;  // an OpenAI "messages" array
  std::string tools_json;     // an OpenAI "tools" array; "" when none
  int max_tokens = 16;
  uint32_t flags = 0;         // TraceFlag bits
};

// Builds the trace. REQUIRES: options are positive (InvalidArgument otherwise).
Result<std::vector<TraceRequest>> GenerateTrace(const TraceOptions& options);

// One long agent session: a single conversation that grows by about step_tokens a
// request, from about start_tokens (system prompt with n_tools tool schemas, the user's task)
// until the next request would pass max_context_tokens. Between two requests the history gains
// one assistant turn that reasons (<think>…</think> in its content) and calls a tool with
// OpenAI "tool_calls", then the "tool" message with its result; or, every user_every requests,
// a final answer and a new user message (a question and pasted command output). After a new
// user message the Qwen3-style template strips the reasoning of every earlier assistant turn,
// so that request diverges from the previous one inside the history (at the first assistant
// turn after the previous user message). Token counts are approximate, as in TraceOptions
// (calibrated on the test models' tokenizer). The defaults are `prefixd bench --long-session`'s.
struct LongSessionOptions {
  uint64_t seed = 1;
  int n_tools = 4;                  // tool schemas offered and called (at most 6)
  int start_tokens = 4000;          // the first request, approximately
  int step_tokens = 1500;           // growth per request, approximately
  int max_context_tokens = 65536;   // prompt + max_tokens of the last request stay below this
  int think_tokens = 100;           // reasoning of one assistant turn
  int user_every = 8;               // a new user message every this many requests
  int user_tokens = 60;             // a user's question (the first message, and before a paste)
  int max_tokens = kTraceMaxTokens;  // max_tokens of every request
};

// The number of requests GenerateLongSession makes: 1 + (max_context_tokens - max_tokens -
// start_tokens) / step_tokens; 0 when the options are invalid.
int LongSessionRequests(const LongSessionOptions& options);

// Builds the session: session 0, turn i for request i, no flags. A pure function of the options.
// REQUIRES: 1 <= n_tools <= 6, start_tokens >= 500, step_tokens >= 300, positive sizes,
// max_context_tokens >= start_tokens + max_tokens (InvalidArgument otherwise).
Result<std::vector<TraceRequest>> GenerateLongSession(const LongSessionOptions& options);

// About n_tokens of English-like prose from the trace's word list; a pure function of the seed.
// The benches use it for prompts that must never have been seen before.
std::string WordSalad(uint64_t seed, int n_tokens);

// "branch,restart"; "" when no flag is set.
std::string TraceFlagsToString(uint32_t flags);

// One request as a JSONL line (no newline): an OpenAI chat request {"model", "messages",
// "tools", "max_tokens", "temperature": 0, "stream": false} plus
// "prefixd_trace": {"index", "session", "turn", "flags": [..]}, which a server ignores.
std::string TraceRequestToJsonLine(const TraceRequest& request, size_t index,
                                   const std::string& model);

// Writes / reads a whole trace as JSONL. ReadTraceJsonl names the line it cannot parse.
Status WriteTraceJsonl(const std::string& path, const std::vector<TraceRequest>& trace,
                       const std::string& model = "prefixd");
Result<std::vector<TraceRequest>> ReadTraceJsonl(const std::string& path);

}  // namespace prefixd::bench
