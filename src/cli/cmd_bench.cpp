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

#include "bench/decode.h"
#include "bench/long_session.h"
#include "bench/replay.h"
#include "bench/trace.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace prefixd::cli {
namespace {

using nlohmann::json;

struct BenchArgs {
  bench::ServerOptions server;
  bench::ServerOptions b;  // --b-*: a second server, replayed side by side (b.url "" when none)
  std::string b_out;
  std::string b_md;
  bool no_warmup = false;
  bool alternate = false;  // with b: each request to one server, in turn (a shared tier)
  // The agent trace.
  std::string trace;
  std::string trace_out;
  bool trace_only = false;
  int64_t sessions = 3;
  int64_t turns = 3;
  int64_t system_tokens = 1000;
  int64_t tool_tokens = 150;
  int64_t max_tokens = 8;
  int64_t seed = 1;
  bool no_restart = false;
  bool no_branch = false;
  // The long session.
  bool long_session = false;
  int64_t max_context = 65536;
  int64_t start_tokens = 4000;
  int64_t step_tokens = 1500;
  int64_t user_every = 8;
  int64_t tools = 4;
  // Decode throughput.
  bool decode = false;
  std::string decode_streams = "1,2";
  int64_t decode_tokens = 128;
  int64_t decode_reps = 3;
  // Reports.
  std::string out;
  std::string md;
  std::string combine;
  std::string long_report;
  std::string decode_results;
  std::string tsv;
  std::string title;
  int64_t reprefill_slack = 256;
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

Status WriteOutputs(const BenchArgs& a, const json& r, const std::string& md) {
  if (!a.out.empty()) PREFIXD_RETURN_IF_ERROR(bench::WriteTextFile(a.out, r.dump(2)));
  if (!a.md.empty()) PREFIXD_RETURN_IF_ERROR(bench::WriteTextFile(a.md, md));
  return Status::OK();
}

json ResultsOf(const bench::ServerOptions& so, const BenchArgs& a, const bench::ReplayRun& run,
               const Status& st) {
  const json meta = {{"label", so.label}, {"url", so.url}, {"server_cmd", so.server_cmd},
                     {"trace", a.trace}, {"long_session", a.long_session},
                     {"side_by_side", !a.b.url.empty() && !a.alternate},
                     {"alternating", a.alternate}};
  json r = bench::ResultsJson(meta, run.rows, run.restarted);
  if (!st.ok()) r["error"] = st.ToString();
  return r;
}

Status WriteResults(const std::string& out, const std::string& md, const json& r) {
  if (!out.empty()) PREFIXD_RETURN_IF_ERROR(bench::WriteTextFile(out, r.dump(2)));
  if (!md.empty()) PREFIXD_RETURN_IF_ERROR(bench::WriteTextFile(md, bench::SingleMarkdown(r)));
  bench::PrintSummary(r);
  return Status::OK();
}

// Starts both servers, replays side by side, stops both.
Status ReplayBoth(const BenchArgs& a, const std::vector<bench::TraceRequest>& trace,
                  bench::ReplayRun* run_a, bench::ReplayRun* run_b) {
  bench::ServerUnderTest sa(a.server), sb(a.b);
  Status st = sa.Start();
  if (st.ok()) st = sb.Start();
  if (st.ok() && a.alternate) st = bench::ReplayAlternating(sa, sb, trace, run_a);
  if (st.ok() && !a.alternate) st = bench::ReplaySideBySide(sa, sb, trace, run_a, run_b);
  sa.Stop();
  sb.Stop();
  return st;
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
  bench::ReplayRun run_a, run_b;
  Status st;
  if (a.b.url.empty()) {
    bench::ServerUnderTest server(a.server);
    st = server.Start();
    if (st.ok()) st = bench::Replay(server, trace, &run_a);
    server.Stop();
  } else {
    st = ReplayBoth(a, trace, &run_a, &run_b);
  }
  PREFIXD_RETURN_IF_ERROR(WriteResults(a.out, a.md, ResultsOf(a.server, a, run_a, st)));
  if (!a.b.url.empty() && !a.alternate) {
    PREFIXD_RETURN_IF_ERROR(WriteResults(a.b_out, a.b_md, ResultsOf(a.b, a, run_b, st)));
  }
  return st;
}

Status RunDecode(const BenchArgs& a) {
  bench::DecodeOptions o;
  o.streams.clear();
  for (const std::string& s : SplitCommas(a.decode_streams)) o.streams.push_back(std::atoi(s.c_str()));
  o.max_tokens = int(a.decode_tokens);
  o.reps = int(a.decode_reps);
  o.seed = uint64_t(a.seed);
  bench::ServerUnderTest server(a.server);
  PREFIXD_RETURN_IF_ERROR(server.Start());
  auto r = bench::RunDecode(server, o, a.server.label);
  server.Stop();
  if (!r.ok()) return r.status();
  return WriteOutputs(a, *r, "");
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
  flags.Int("--start-timeout", &a.server.start_timeout_s, "seconds to wait for /health after a start");
  flags.Int("--request-timeout", &a.server.request_timeout_s, "seconds one request may take");
  flags.Bool("--no-warmup", &a.no_warmup, "skip the warm-up request after each server start");
  flags.String("--b-url", &a.b.url,
               "replay side by side against a second server at this URL, both running at once, "
               "alternating which one gets each request first");
  flags.String("--b-label", &a.b.label, "with --b-url: the second server's name");
  flags.String("--b-server-cmd", &a.b.server_cmd, "with --b-url: launch the second server");
  flags.String("--b-server-log", &a.b.server_log, "with --b-url: the second server's output");
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
             "generate one long agent session instead of the agent trace (issue 10)");
  flags.Int("--max-context", &a.max_context,
            "long session: the last prompt plus --max-tokens stays below this, approx tokens");
  flags.Int("--start-tokens", &a.start_tokens, "long session: the first request, approx tokens");
  flags.Int("--step-tokens", &a.step_tokens, "long session: growth per request, approx tokens");
  flags.Int("--user-every", &a.user_every, "long session: a new user message every N requests");
  flags.Int("--tools", &a.tools, "long session: tool schemas (1..6)");
}

void DecodeFlags(Flags& flags, BenchArgs& a) {
  flags.Bool("--decode", &a.decode,
             "measure decode tokens/s with concurrent streams instead of replaying (issue 11)");
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
