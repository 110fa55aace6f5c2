#include "bench/bench_run.h"

#include <nlohmann/json.hpp>

#include "bench/replay.h"

namespace prefixd::bench {

namespace {

using nlohmann::json;

json ResultsOf(const ReplayRunOptions& o, const ServerOptions& so, const ReplayRun& run,
               const Status& st) {
  const json meta = {{"label", so.label}, {"url", so.url}, {"server_cmd", so.server_cmd},
                     {"trace", o.trace_path}, {"long_session", o.long_session},
                     {"side_by_side", o.b.has_value() && !o.alternate},
                     {"alternating", o.alternate}};
  json r = ResultsJson(meta, run.rows, run.restarted);
  if (!st.ok()) r["error"] = st.ToString();
  return r;
}

Status WriteResults(const ReplayTarget& t, const json& r) {
  if (!t.out.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(t.out, r.dump(2)));
  if (!t.md.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(t.md, SingleMarkdown(r)));
  PrintSummary(r);
  return Status::OK();
}

Status ReplayOne(const ServerOptions& so, const std::vector<TraceRequest>& trace,
                 ReplayRun* run) {
  ServerUnderTest server(so);
  Status st = server.Start();
  if (st.ok()) st = Replay(server, trace, run);
  server.Stop();
  return st;
}

// Starts both servers, replays side by side (or in turn), stops both.
Status ReplayBoth(const ServerOptions& a, const ServerOptions& b, bool alternate,
                  const std::vector<TraceRequest>& trace, ReplayRun* run_a, ReplayRun* run_b) {
  ServerUnderTest sa(a), sb(b);
  Status st = sa.Start();
  if (st.ok()) st = sb.Start();
  if (st.ok() && alternate) st = ReplayAlternating(sa, sb, trace, run_a);
  if (st.ok() && !alternate) st = ReplaySideBySide(sa, sb, trace, run_a, run_b);
  sa.Stop();
  sb.Stop();
  return st;
}

}  // namespace

Status RunReplay(const ReplayRunOptions& options, const std::vector<TraceRequest>& trace) {
  ReplayRun run_a, run_b;
  const Status st = options.b ? ReplayBoth(options.a.server, options.b->server,
                                           options.alternate, trace, &run_a, &run_b)
                              : ReplayOne(options.a.server, trace, &run_a);
  PREFIXD_RETURN_IF_ERROR(
      WriteResults(options.a, ResultsOf(options, options.a.server, run_a, st)));
  if (options.b && !options.alternate) {
    PREFIXD_RETURN_IF_ERROR(
        WriteResults(*options.b, ResultsOf(options, options.b->server, run_b, st)));
  }
  return st;
}

Status RunDecodeToFiles(const ServerOptions& so, const DecodeOptions& options,
                        const std::string& out, const std::string& md) {
  ServerUnderTest server(so);
  PREFIXD_RETURN_IF_ERROR(server.Start());
  auto r = RunDecode(server, options, so.label);
  server.Stop();
  if (!r.ok()) return r.status();
  if (!out.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(out, r->dump(2)));
  if (!md.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(md, ""));
  return Status::OK();
}

}  // namespace prefixd::bench
