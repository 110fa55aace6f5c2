// A bench run from start to end, as `prefixd bench` runs it: start the server(s) under test,
// replay a trace (side by side with a second server when given) or measure decode throughput,
// stop them, write the results. The CLI only turns flags into these options.
//
// Thread-safety: one run per thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/decode.h"
#include "bench/http_client.h"
#include "bench/trace.h"
#include "util/status.h"

namespace prefixd::bench {

// One server of a replay and where its results go ("" skips that output).
struct ReplayTarget {
  ServerOptions server;
  std::string out;  // the results file (ResultsJson)
  std::string md;   // the results as Markdown (SingleMarkdown)
};

struct ReplayRunOptions {
  ReplayTarget a;
  std::optional<ReplayTarget> b;  // replayed side by side with `a` (ReplaySideBySide)
  bool alternate = false;  // with b: each request to one server in turn (ReplayAlternating), one
                           // set of results (a's)
  std::string trace_path;         // recorded in the results; "" for a generated trace
  bool long_session = false;      // recorded in the results
};

// Starts the server(s), replays `trace`, stops them, then writes each server's results and
// prints its summary line, also when the replay failed (the results carry "error" and the
// rows measured so far). Returns the replay's status, else the first write error.
Status RunReplay(const ReplayRunOptions& options, const std::vector<TraceRequest>& trace);

// Starts `server`, measures decode throughput (RunDecode), stops it, and writes the results
// to `out` (JSON) and an empty `md` ("" skips either).
Status RunDecodeToFiles(const ServerOptions& server, const DecodeOptions& options,
                        const std::string& out, const std::string& md);

}  // namespace prefixd::bench
