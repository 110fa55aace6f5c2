#include "bench/long_session.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "bench/replay.h"

namespace prefixd::bench {

using nlohmann::json;

namespace {

double D(const json& j, const char* key) { return j.value(key, 0.0); }
int64_t I(const json& j, const char* key) { return j.value(key, int64_t(0)); }

// Session totals of one side; wall = the sum of the requests' client times (send to end of
// stream), so the time between requests (the bench's own token counting) is not in it.
json SideTotals(const json& r) {
  double wall = 0, ttft = 0, model = 0, outside = 0, restore = 0;
  // Sums that turn -1 once a request did not report the number.
  int64_t calls = 0, counted_calls = 0, counted_ubatches = 0;
  auto add = [](int64_t& sum, const json& q, const char* key) {
    const int64_t c = q.value(key, int64_t(-1));
    sum = sum < 0 || c < 0 ? -1 : sum + c;
  };
  for (const json& q : r["requests"]) {
    add(calls, q, "prompt_chunks");
    add(counted_calls, q, "counted_calls");
    add(counted_ubatches, q, "counted_ubatches");
    wall += D(q, "total_ms");
    ttft += D(q, "ttft_ms");
    model += std::max(D(q, "model_ms"), 0.0);
    outside += std::max(D(q, "outside_ms"), 0.0);
    restore += std::max(D(q, "restore_ms"), 0.0);
  }
  const json& t = r["totals"];
  return {{"label", r.value("label", std::string())},
          {"requests", I(t, "requests")},
          {"wall_ms", wall},
          {"ttft_ms_total", ttft},
          {"model_ms_total", model},
          {"outside_ms_total", outside},
          {"restore_ms_total", restore},
          {"prefill_calls", calls},
          {"counted_calls", counted_calls},
          {"counted_ubatches", counted_ubatches},
          {"prompt_tokens", I(t, "prompt_tokens")},
          {"cached_tokens", I(t, "cached_tokens")},
          {"evaluated_tokens", I(t, "evaluated_tokens")},
          {"reuse_ratio", D(t, "reuse_ratio")}};
}

json RequestSide(const json& q) {
  return {{"cached_tokens", q["cached_tokens"]},   {"evaluated_tokens", q["evaluated_tokens"]},
          {"ttft_ms", q["ttft_ms"]},               {"total_ms", q["total_ms"]},
          {"model_ms", q["model_ms"]},             {"outside_ms", q["outside_ms"]},
          {"restore_ms", q.value("restore_ms", -1.0)}, {"queue_ms", q.value("queue_ms", -1.0)},
          {"prompt_eval_ms", q.value("prompt_eval_ms", -1.0)},
          {"prompt_chunks", q.value("prompt_chunks", int64_t(-1))},
          {"counted_calls", q.value("counted_calls", int64_t(-1))},
          {"counted_ubatches", q.value("counted_ubatches", int64_t(-1))}};
}

json Requests(const json& ra, const json& rb) {
  json out = json::array();
  for (size_t i = 0; i < ra.size(); ++i) {
    out.push_back({{"index", i},
                   {"prompt_tokens", ra[i]["prompt_tokens"]},
                   {"reusable_tokens", ra[i]["reusable_tokens"]},
                   {"a", RequestSide(ra[i])},
                   {"b", RequestSide(rb[i])}});
  }
  return out;
}

// The request closest to each milestone the session reaches (within 10%).
json Milestones(const json& requests) {
  json out = json::array();
  for (int64_t target : kLongSessionMilestones) {
    const json* best = nullptr;
    for (const json& q : requests) {
      const int64_t p = I(q, "prompt_tokens");
      if (!best || std::llabs(p - target) < std::llabs(I(*best, "prompt_tokens") - target)) {
        best = &q;
      }
    }
    if (!best || std::llabs(I(*best, "prompt_tokens") - target) > target / 10) continue;
    out.push_back({{"context", target}, {"index", (*best)["index"]},
                   {"prompt_tokens", (*best)["prompt_tokens"]}, {"a", (*best)["a"]},
                   {"b", (*best)["b"]}});
  }
  return out;
}

}  // namespace

Result<json> LongSessionReport(const json& a, const json& b, const std::vector<json>& decode,
                               const std::string& title) {
  for (const json* r : {&a, &b}) {
    if (!r->contains("requests") || !r->contains("totals")) {
      return Status::InvalidArgument("long-session report: not a prefixd bench results file");
    }
  }
  if (a["requests"].size() != b["requests"].size()) {
    return Status::InvalidArgument("long-session report: the two runs have different lengths (" +
                                   std::to_string(a["requests"].size()) + " and " +
                                   std::to_string(b["requests"].size()) + " requests)");
  }
  const json ta = SideTotals(a), tb = SideTotals(b);
  const json requests = Requests(a["requests"], b["requests"]);
  return json{{"title", title},
              {"a", ta},
              {"b", tb},
              {"wall_ratio_a_over_b", SafeRatio(D(ta, "wall_ms"), D(tb, "wall_ms"))},
              {"ttft_ratio_a_over_b", SafeRatio(D(ta, "ttft_ms_total"), D(tb, "ttft_ms_total"))},
              {"milestones", Milestones(requests)},
              {"requests", requests},
              {"decode", decode}};
}

namespace {

// A count, "n/a" when it was not measured (-1).
std::string Count(const json& side, const char* key) {
  const int64_t c = side.value(key, int64_t(-1));
  return c < 0 ? std::string("n/a") : std::to_string(c);
}

std::string Ms(const json& side, const char* key) {
  const double v = side.value(key, -1.0);
  return v < 0 ? "n/a" : Fixed(v);
}

void TotalsTable(std::ostringstream& md, const json& r) {
  const json &a = r["a"], &b = r["b"];
  auto row = [&](const char* name, const std::string& va, const std::string& vb) {
    md << "| " << name << " | " << va << " | " << vb << " |\n";
  };
  md << "| | " << a.value("label", "a") << " | " << b.value("label", "b") << " |\n"
     << "|---|---:|---:|\n";
  row("requests", std::to_string(I(a, "requests")), std::to_string(I(b, "requests")));
  row("session wall (s)", Fixed(D(a, "wall_ms") / 1000, 1), Fixed(D(b, "wall_ms") / 1000, 1));
  row("sum of TTFT (s)", Fixed(D(a, "ttft_ms_total") / 1000, 1),
      Fixed(D(b, "ttft_ms_total") / 1000, 1));
  row("sum of model time (s)", Fixed(D(a, "model_ms_total") / 1000, 1),
      Fixed(D(b, "model_ms_total") / 1000, 1));
  row("sum of outside-model time (s)", Fixed(D(a, "outside_ms_total") / 1000, 2),
      Fixed(D(b, "outside_ms_total") / 1000, 2));
  row("prefill calls (reported)", Count(a, "prefill_calls"), Count(b, "prefill_calls"));
  row("prefill calls (counted)", Count(a, "counted_calls"), Count(b, "counted_calls"));
  row("prefill ubatches (counted)", Count(a, "counted_ubatches"), Count(b, "counted_ubatches"));
  row("evaluated prompt tokens", std::to_string(I(a, "evaluated_tokens")),
      std::to_string(I(b, "evaluated_tokens")));
  row("cached prompt tokens", std::to_string(I(a, "cached_tokens")),
      std::to_string(I(b, "cached_tokens")));
  row("reuse (cached / reusable)", Pct(D(a, "reuse_ratio")), Pct(D(b, "reuse_ratio")));
  md << "\nSession wall ratio " << a.value("label", "a") << " / " << b.value("label", "b")
     << ": **" << Fixed(D(r, "wall_ratio_a_over_b"), 3) << "**; TTFT ratio "
     << Fixed(D(r, "ttft_ratio_a_over_b"), 3) << ".\n\n";
}

void MilestoneTable(std::ostringstream& md, const json& r) {
  const std::string la = r["a"].value("label", "a"), lb = r["b"].value("label", "b");
  md << "| context | request | prompt | TTFT ms " << la << " | TTFT ms " << lb
     << " | outside ms " << la << " | outside ms " << lb << " |\n"
     << "|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const json& m : r["milestones"]) {
    md << "| " << I(m, "context") / 1024 << "K | " << I(m, "index") << " | "
       << I(m, "prompt_tokens") << " | " << Ms(m["a"], "ttft_ms") << " | "
       << Ms(m["b"], "ttft_ms") << " | " << Ms(m["a"], "outside_ms") << " | "
       << Ms(m["b"], "outside_ms") << " |\n";
  }
  md << "\n";
}

void DecodeTable(std::ostringstream& md, const json& r) {
  if (r["decode"].empty()) return;
  md << "## Decode throughput\n\n| server | streams | tokens/s (all streams) | tokens/s per "
        "stream |\n|---|---:|---:|---:|\n";
  for (const json& d : r["decode"]) {
    for (const json& s : d["results"]) {
      md << "| " << d.value("label", "?") << " | " << I(s, "streams") << " | "
         << Fixed(D(s, "tokens_per_s"), 1) << " | " << Fixed(D(s, "per_stream_tokens_per_s"), 1)
         << " |\n";
    }
  }
  if (!r["decode"].empty()) {
    const json& d0 = r["decode"][0];
    md << "\n" << I(d0, "max_tokens") << " tokens per stream with ignore_eos, median of "
       << I(d0, "reps") << " runs.\n";
  }
  md << "\n";
}

void RequestTable(std::ostringstream& md, const json& r) {
  const std::string la = r["a"].value("label", "a"), lb = r["b"].value("label", "b");
  md << "## Per request\n\n| # | prompt | cached " << la << " | cached " << lb << " | eval "
     << la << " | eval " << lb << " | TTFT ms " << la << " | TTFT ms " << lb << " | outside ms "
     << la << " | outside ms " << lb << " | restore ms " << la << " | calls " << la
     << " | ubatches " << la << " | ubatches " << lb << " |\n"
     << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const json& q : r["requests"]) {
    const json &a = q["a"], &b = q["b"];
    md << "| " << I(q, "index") << " | " << I(q, "prompt_tokens") << " | "
       << I(a, "cached_tokens") << " | " << I(b, "cached_tokens") << " | "
       << I(a, "evaluated_tokens") << " | " << I(b, "evaluated_tokens") << " | "
       << Ms(a, "ttft_ms") << " | " << Ms(b, "ttft_ms") << " | " << Ms(a, "outside_ms")
       << " | " << Ms(b, "outside_ms") << " | " << Ms(a, "restore_ms") << " | "
       << Count(a, "prompt_chunks") << " | " << Count(a, "counted_ubatches") << " | "
       << Count(b, "counted_ubatches") << " |\n";
  }
}

}  // namespace

std::string LongSessionMarkdown(const json& r) {
  std::ostringstream md;
  md << "# " << r.value("title", std::string("long session")) << "\n\n";
  TotalsTable(md, r);
  MilestoneTable(md, r);
  DecodeTable(md, r);
  RequestTable(md, r);
  md << "\nTTFT: client, send to first streamed choice. outside = TTFT - model time; model time "
        "= timings.prompt_eval_ms, else timings.prompt_ms - timings.restore_ms, else "
        "timings.prompt_ms (docs/bench.md).\n";
  return md.str();
}

std::string LongSessionTsv(const json& r) {
  std::ostringstream t;
  const std::string la = r["a"].value("label", "a"), lb = r["b"].value("label", "b");
  t << "# prompt_tokens\tttft_s_" << la << "\tttft_s_" << lb << "\toutside_ms_" << la
    << "\toutside_ms_" << lb << "\n";
  for (const json& q : r["requests"]) {
    t << I(q, "prompt_tokens") << "\t" << Fixed(D(q["a"], "ttft_ms") / 1000, 3) << "\t"
      << Fixed(D(q["b"], "ttft_ms") / 1000, 3) << "\t" << Fixed(D(q["a"], "outside_ms"), 1)
      << "\t" << Fixed(D(q["b"], "outside_ms"), 1) << "\n";
  }
  return t.str();
}

Status WriteLongSessionReport(const LongReportOptions& o) {
  PREFIXD_ASSIGN_OR_RETURN(json a, ReadJsonFile(o.a_path));
  PREFIXD_ASSIGN_OR_RETURN(json b, ReadJsonFile(o.b_path));
  std::vector<json> decode;
  for (const std::string& p : o.decode_paths) {
    PREFIXD_ASSIGN_OR_RETURN(json d, ReadJsonFile(p));
    decode.push_back(std::move(d));
  }
  PREFIXD_ASSIGN_OR_RETURN(json report, LongSessionReport(a, b, decode, o.title));
  const std::string md = LongSessionMarkdown(report);
  if (!o.out.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(o.out, report.dump(2)));
  if (!o.md.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(o.md, md));
  if (!o.tsv.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(o.tsv, LongSessionTsv(report)));
  std::fputs(md.c_str(), stdout);
  return Status::OK();
}

}  // namespace prefixd::bench
