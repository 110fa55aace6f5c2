// The long-session report: two replays of the same long session
// (GenerateLongSession) against two servers — prefixd and llama-server — side by side, per
// request and in total, plus the decode throughput runs (bench/decode.h) of any number of
// server configurations. docs/bench.md explains every number.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/status.h"

namespace prefixd::bench {

// Context lengths the report picks out (the request whose prompt is closest to each, when the
// session reaches within one step of it).
inline constexpr int64_t kLongSessionMilestones[] = {8192, 16384, 32768, 65536, 131072};

// Builds the report from results files (ResultsJson) of the same trace and decode results
// (RunDecode). InvalidArgument when the two runs differ in length.
// Shape: {"title", "a": {label, totals}, "b": {...}, "wall_ratio_a_over_b",
// "milestones": [...], "requests": [{index, prompt_tokens, a: {...}, b: {...}}], "decode": [...]}.
Result<nlohmann::json> LongSessionReport(const nlohmann::json& a, const nlohmann::json& b,
                                         const std::vector<nlohmann::json>& decode,
                                         const std::string& title);

// The report as Markdown, and as a TSV for the chart: prompt tokens, then per server TTFT (s)
// and outside-model time (ms).
std::string LongSessionMarkdown(const nlohmann::json& report);
std::string LongSessionTsv(const nlohmann::json& report);

struct LongReportOptions {
  std::string a_path, b_path;            // results files of the two servers
  std::vector<std::string> decode_paths;  // decode results files
  std::string title;
  std::string out, md, tsv;              // "" skips that output
};

// Reads the files, builds the report and writes the outputs; prints the Markdown.
Status WriteLongSessionReport(const LongReportOptions& options);

}  // namespace prefixd::bench
