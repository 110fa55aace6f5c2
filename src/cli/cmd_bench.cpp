// prefixd bench: flag parsing and wiring for the HTTP benchmarks of bench/ (docs/bench.md).
//   (default)          replay an agent trace (--trace FILE, or generated from the trace flags)
//   --long-session     replay one long agent session (bench/trace.h GenerateLongSession)
//   --decode           decode throughput with concurrent streams (bench/decode.h)
//   --combine A,B      two replay results side by side
//   --long-report A,B  the long-session report of two replays plus decode results
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_run.h"
#include "bench/decode.h"
#include "bench/long_session.h"
#include "bench/replay.h"
#include "bench/trace.h"
#include "cli/commands.h"
#include "util/flags.h"

namespace prefixd::cli {
namespace {

const bench::TraceOptions kTrace;
const bench::LongSessionOptions kLong;
const bench::DecodeOptions kDecode;

std::string JoinCommas(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

struct BenchArgs {
  bench::ServerOptions server;
  bench::ServerOptions b;  // --b-*: a second server, replayed side by side (b.url "" when none)
  std::string b_out;
  std::string b_md;
  bool no_warmup = false;
  bool alternate = false;  // with b: each request to one server, in turn (a shared tier)
  // The agent trace; the defaults are the options structs' (bench/trace.h, bench/decode.h).
  std::string trace;
  std::string trace_out;
  bool trace_only = false;
  int64_t sessions = kTrace.n_sessions;
  int64_t turns = kTrace.turns_per_session;
  int64_t system_tokens = kTrace.system_tokens;
  int64_t tool_tokens = kTrace.tool_tokens;
  int64_t max_tokens = kTrace.max_tokens;  // the long session's too
  int64_t seed = int64_t(kTrace.seed);
  bool no_restart = false;
  bool no_branch = false;
  // The long session.
  bool long_session = false;
  int64_t max_context = kLong.max_context_tokens;
  int64_t start_tokens = kLong.start_tokens;
  int64_t step_tokens = kLong.step_tokens;
  int64_t user_every = kLong.user_every;
  int64_t tools = kLong.n_tools;
  // Decode throughput.
  bool decode = false;
  std::string decode_streams = JoinCommas(kDecode.streams);
  int64_t decode_tokens = kDecode.max_tokens;
  int64_t decode_reps = kDecode.reps;
  // Reports.
  std::string out;
  std::string md;
  std::string combine;
  std::string long_report;
  std::string decode_results;
  std::string tsv;
  std::string title;
  int64_t reprefill_slack = bench::CombineOptions{}.reprefill_slack;
};

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

Result<std::vector<bench::TraceRequest>> GenerateFromFlags(const BenchArgs& a) {
  if (a.long_session) {
    bench::LongSessionOptions o;
    o.seed = uint64_t(a.seed);
    o.n_tools = int(a.tools);
    o.start_tokens = int(a.start_tokens);
    o.step_tokens = int(a.step_tokens);
    o.max_context_tokens = int(a.max_context);
    o.user_every = int(a.user_every);
    o.max_tokens = int(a.max_tokens);
    return bench::GenerateLongSession(o);
  }
  bench::TraceOptions o;
  o.seed = uint64_t(a.seed);
  o.n_sessions = int(a.sessions);
  o.turns_per_session = int(a.turns);
  o.system_tokens = int(a.system_tokens);
  o.tool_tokens = int(a.tool_tokens);
  o.max_tokens = int(a.max_tokens);
  o.branch = !a.no_branch;
  o.restart = !a.no_restart;
  return bench::GenerateTrace(o);
}

Result<std::vector<bench::TraceRequest>> LoadTrace(const BenchArgs& a) {
  if (!a.trace.empty()) return bench::ReadTraceJsonl(a.trace);
  PREFIXD_ASSIGN_OR_RETURN(auto trace, GenerateFromFlags(a));
  if (!a.trace_out.empty()) PREFIXD_RETURN_IF_ERROR(bench::WriteTraceJsonl(a.trace_out, trace));
  return trace;
}

Status RunReplay(const BenchArgs& a) {
  PREFIXD_ASSIGN_OR_RETURN(auto trace, LoadTrace(a));
  if (a.trace_only) {
    if (a.trace_out.empty()) return Status::InvalidArgument("--trace-only needs --trace-out");
    bench::Progress("%zu requests written to %s", trace.size(), a.trace_out.c_str());
    return Status::OK();
  }
  bench::Progress("%zu requests against %s (%s)%s", trace.size(), a.server.url.c_str(),
                  a.server.label.c_str(),
                  a.b.url.empty()  ? ""
                  : a.alternate    ? " and --b-url in turn"
                                   : " and --b-url side by side");
  bench::ReplayRunOptions o;
  o.a = {a.server, a.out, a.md};
  if (!a.b.url.empty()) o.b = bench::ReplayTarget{a.b, a.b_out, a.b_md};
  o.alternate = a.alternate;
  o.trace_path = a.trace;
  o.long_session = a.long_session;
  return bench::RunReplay(o, trace);
}

Status RunDecode(const BenchArgs& a) {
  bench::DecodeOptions o;
  o.streams.clear();
  for (const std::string& s : SplitCommas(a.decode_streams)) o.streams.push_back(std::atoi(s.c_str()));
  o.max_tokens = int(a.decode_tokens);
  o.reps = int(a.decode_reps);
  o.seed = uint64_t(a.seed);
  return bench::RunDecodeToFiles(a.server, o, a.out, a.md);
}

Status RunCombine(const BenchArgs& a) {
  const auto paths = SplitCommas(a.combine);
  if (paths.size() != 2) return Status::InvalidArgument("--combine: A.json,B.json");
  return bench::Combine({paths[0], paths[1], a.out, a.md, a.tsv, a.title, a.reprefill_slack});
}

Status RunLongReport(const BenchArgs& a) {
  const auto paths = SplitCommas(a.long_report);
  if (paths.size() != 2) return Status::InvalidArgument("--long-report: A.json,B.json");
  return bench::WriteLongSessionReport(
      {paths[0], paths[1], SplitCommas(a.decode_results), a.title, a.out, a.md, a.tsv});
}

Status RunBench(BenchArgs a) {
  if (!a.combine.empty()) return RunCombine(a);
  if (!a.long_report.empty()) return RunLongReport(a);
  if (a.server.label.empty()) a.server.label = a.server.url;
  a.server.warmup = !a.no_warmup;
  if (!a.b.url.empty()) {
    a.b.api_key = a.server.api_key;
    a.b.model = a.server.model;
    a.b.start_timeout_s = a.server.start_timeout_s;
    a.b.request_timeout_s = a.server.request_timeout_s;
    a.b.warmup = a.server.warmup;
    if (a.b.label.empty()) a.b.label = a.b.url;
  }
  if (a.decode) return RunDecode(a);
  return RunReplay(a);
}

void ServerFlags(Flags& flags, BenchArgs& a) {
  flags.String("--url", &a.server.url, "the endpoint's base URL");
  flags.String("--api-key", &a.server.api_key, "sent as Authorization: Bearer KEY");
  flags.String("--model", &a.server.model, "\"model\" of every request ('' leaves it out)");
  flags.String("--label", &a.server.label, "the server's name in the report (default: the URL)");
  flags.String("--server-cmd", &a.server.server_cmd,
               "launch this shell command as the server (listening at --url), wait for /health, "
               "restart it at the trace's restart marker, stop it at the end");
  flags.String("--server-log", &a.server.server_log, "append the launched server's output here");
  flags.String("--decode-log", &a.server.decode_log,
               "the server's llama_decode log (bench/decode_counter.cpp, preloaded into it by "
               "the server command): count each request's prefill calls and ubatches");
  flags.Int("--start-timeout", &a.server.start_timeout_s, "seconds to wait for /health after a start");
  flags.Int("--request-timeout", &a.server.request_timeout_s, "seconds one request may take");
  flags.Bool("--no-warmup", &a.no_warmup, "skip the warm-up request after each server start");
  flags.String("--b-url", &a.b.url,
               "replay side by side against a second server at this URL, both running at once, "
               "alternating which one gets each request first");
  flags.String("--b-label", &a.b.label, "with --b-url: the second server's name");
  flags.String("--b-server-cmd", &a.b.server_cmd, "with --b-url: launch the second server");
  flags.String("--b-server-log", &a.b.server_log, "with --b-url: the second server's output");
  flags.String("--b-decode-log", &a.b.decode_log, "with --b-url: the second server's --decode-log");
  flags.String("--b-out", &a.b_out, "with --b-url: the second server's results as JSON");
  flags.String("--b-md", &a.b_md, "with --b-url: the second server's results as Markdown");
  flags.Bool("--alternate", &a.alternate,
             "with --b-url: send each request to one of the two servers, in turn (servers "
             "sharing a cache tier, docs/deployment.md); one report");
}

void TraceFlags(Flags& flags, BenchArgs& a) {
  flags.String("--trace", &a.trace, "replay this JSONL trace instead of generating one");
  flags.String("--trace-out", &a.trace_out, "write the generated trace as JSONL here");
  flags.Bool("--trace-only", &a.trace_only, "write the generated trace (--trace-out) and exit");
  flags.Int("--sessions", &a.sessions, "generated trace: agent sessions");
  flags.Int("--turns", &a.turns, "generated trace: requests per session");
  flags.Int("--system-tokens", &a.system_tokens, "generated trace: system prompt, approx tokens");
  flags.Int("--tool-tokens", &a.tool_tokens, "generated trace: one tool result, approx tokens");
  flags.Int("--max-tokens", &a.max_tokens, "generated traces: tokens generated per request");
  flags.Int("--seed", &a.seed, "generated traces and decode prompts: seed");
  flags.Bool("--no-restart", &a.no_restart, "generated trace: no restart marker");
  flags.Bool("--no-branch", &a.no_branch, "generated trace: no branch request");
}

void LongSessionFlags(Flags& flags, BenchArgs& a) {
  flags.Bool("--long-session", &a.long_session,
             "generate one long agent session instead of the agent trace");
  flags.Int("--max-context", &a.max_context,
            "long session: the last prompt plus --max-tokens stays below this, approx tokens");
  flags.Int("--start-tokens", &a.start_tokens, "long session: the first request, approx tokens");
  flags.Int("--step-tokens", &a.step_tokens, "long session: growth per request, approx tokens");
  flags.Int("--user-every", &a.user_every, "long session: a new user message every N requests");
  flags.Int("--tools", &a.tools, "long session: tool schemas (1..6)");
}

void DecodeFlags(Flags& flags, BenchArgs& a) {
  flags.Bool("--decode", &a.decode,
             "measure decode tokens/s with concurrent streams instead of replaying");
  flags.String("--decode-streams", &a.decode_streams, "decode: concurrent stream counts");
  flags.Int("--decode-tokens", &a.decode_tokens, "decode: max_tokens per stream (ignore_eos)");
  flags.Int("--decode-reps", &a.decode_reps, "decode: runs per stream count (median)");
}

void ReportFlags(Flags& flags, BenchArgs& a) {
  flags.String("--out", &a.out, "write the results as JSON here");
  flags.String("--md", &a.md, "write the results as a Markdown table here");
  flags.String("--combine", &a.combine,
               "A.json,B.json: no replay; put two results files side by side (--out, --md, "
               "--tsv)");
  flags.String("--long-report", &a.long_report,
               "A.json,B.json: no replay; the long-session report of two long-session results "
               "(--decode-results, --out, --md, --tsv)");
  flags.String("--decode-results", &a.decode_results,
               "with --long-report: decode results files, comma-separated");
  flags.String("--tsv", &a.tsv, "with --combine / --long-report: per-request data for charts");
  flags.String("--title", &a.title, "with --combine / --long-report: the Markdown title");
  flags.Int("--reprefill-slack", &a.reprefill_slack,
            "with --combine: B re-prefilled a request when it evaluated more than this many "
            "reusable tokens");
}

}  // namespace

int CmdBench(int argc, char** argv) {
  BenchArgs a;
  a.b.url.clear();
  Flags flags("bench",
              "Replay an agent trace or a long agent session against an OpenAI-compatible "
              "endpoint and report prompt reuse and TTFT, or measure decode throughput "
              "(docs/bench.md).");
  ServerFlags(flags, a);
  TraceFlags(flags, a);
  LongSessionFlags(flags, a);
  DecodeFlags(flags, a);
  ReportFlags(flags, a);
  return RunWithFlags(flags, argc, argv, [&] {
    signal(SIGPIPE, SIG_IGN);
    Status st = RunBench(a);
    if (st.ok()) return 0;
    std::fprintf(stderr, "prefixd bench: %s\n", st.ToString().c_str());
    return st.code() == Status::Code::kInvalidArgument ? 2 : 1;
  });
}

}  // namespace prefixd::cli
