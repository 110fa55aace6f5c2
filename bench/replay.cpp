#include "bench/replay.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench/decode_log.h"

namespace prefixd::bench {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Shared helpers.

Result<json> ReadJsonFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IOError("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Status::InvalidArgument(path + ": not valid JSON");
  return j;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return Status::IOError("cannot write " + path);
  return Status::OK();
}

std::string Fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Pct(double r) { return Fixed(100 * r, 1) + "%"; }

double SafeRatio(double a, double b) { return b > 0 ? a / b : 0; }

namespace {

std::string Num(const json& j, const char* key) { return std::to_string(j.value(key, int64_t(0))); }

int64_t IntAt(const json& j, const char* key, int64_t fallback) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<int64_t>()
                                                                  : fallback;
}

double DoubleAt(const json& j, const char* key, double fallback) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>()
                                                                  : fallback;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// One request.

double RequestResult::ModelMs() const {
  if (server_prompt_ms < 0) return -1;
  if (prompt_eval_ms >= 0) return prompt_eval_ms;
  return server_prompt_ms - std::max(restore_ms, 0.0);
}

double RequestResult::OutsideMs() const {
  const double model = ModelMs();
  return model < 0 ? -1 : ttft_ms - model;
}

json ToJson(const RequestResult& m) {
  return {{"index", m.index},
          {"session", m.session},
          {"turn", m.turn},
          {"flags", TraceFlagsToString(m.flags)},
          {"prompt_tokens", m.prompt},
          {"reusable_tokens", m.reusable},
          {"cached_tokens", m.cached},
          {"evaluated_tokens", m.evaluated},
          {"completion_tokens", m.completion},
          {"ttft_ms", m.ttft_ms},
          {"total_ms", m.total_ms},
          {"server_prompt_ms", m.server_prompt_ms},
          {"restore_ms", m.restore_ms},
          {"queue_ms", m.queue_ms},
          {"prompt_eval_ms", m.prompt_eval_ms},
          {"prompt_chunks", m.prompt_chunks},
          {"counted_calls", m.counted_calls},
          {"counted_ubatches", m.counted_ubatches},
          {"model_ms", m.ModelMs()},
          {"outside_ms", m.OutsideMs()},
          {"restarted_before", m.restarted},
          {"output", m.output},
          {"answer_error", m.answer_error}};
}

json ChatBody(const TraceRequest& t, const std::string& model, int max_tokens, bool stream) {
  json body = {{"messages", json::parse(t.messages_json)}};
  if (!t.tools_json.empty()) body["tools"] = json::parse(t.tools_json);
  if (!model.empty()) body["model"] = model;
  if (max_tokens > 0) {
    body["max_tokens"] = max_tokens;
    body["temperature"] = 0;
  }
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    // llama-server then puts its timings (cache_n, prompt_n) in every chunk, the first one too:
    // the prompt's numbers survive an answer its chat parser rejects (see Send).
    body["timings_per_token"] = true;
  }
  return body;
}

int64_t LongestSharedPrefix(const std::vector<std::vector<int64_t>>& earlier,
                            const std::vector<int64_t>& p) {
  size_t best = 0;
  for (const auto& e : earlier) {
    const size_t n = std::min(e.size(), p.size());
    size_t i = 0;
    while (i < n && e[i] == p[i]) ++i;
    best = std::max(best, i);
  }
  return int64_t(best);
}

void ReadServerNumbers(const StreamStats& s, RequestResult* m) {
  m->prompt = IntAt(s.usage, "prompt_tokens",
                    IntAt(s.timings, "cache_n", 0) + IntAt(s.timings, "prompt_n", 0));
  m->completion = IntAt(s.usage, "completion_tokens", 0);
  const json details = s.usage.is_object() && s.usage.contains("prompt_tokens_details")
                           ? s.usage["prompt_tokens_details"]
                           : json::object();
  m->cached = IntAt(details, "cached_tokens", IntAt(s.timings, "cache_n", 0));
  m->evaluated = IntAt(s.timings, "prompt_n", m->prompt - m->cached);
  m->server_prompt_ms = DoubleAt(s.timings, "prompt_ms", -1);
  m->restore_ms = DoubleAt(s.timings, "restore_ms", -1);
  m->queue_ms = DoubleAt(s.timings, "queue_ms", -1);
  m->prompt_eval_ms = DoubleAt(s.timings, "prompt_eval_ms", -1);
  m->prompt_chunks = IntAt(s.timings, "prompt_chunks", -1);
  m->output = s.output;
}

namespace {

// The prompt's token ids as the server sees them (see the header).
Result<std::vector<int64_t>> PromptTokens(Endpoint& ep, const TraceRequest& t,
                                          const std::string& model) {
  PREFIXD_ASSIGN_OR_RETURN(json tpl, ep.PostJson("/apply-template", ChatBody(t, model, 0, false)));
  json ids;
  if (tpl.contains("tokens") && tpl["tokens"].is_array()) {
    ids = tpl["tokens"];
  } else {
    if (!tpl.contains("prompt") || !tpl["prompt"].is_string()) {
      return Status::IOError("/apply-template: no \"prompt\" in the answer");
    }
    const json req = {{"content", tpl["prompt"]}, {"add_special", true}, {"parse_special", true}};
    PREFIXD_ASSIGN_OR_RETURN(json tok, ep.PostJson("/tokenize", req));
    ids = tok.value("tokens", json::array());
  }
  std::vector<int64_t> out;
  out.reserve(ids.size());
  for (const json& id : ids) {
    out.push_back(id.is_object() ? id.value("id", int64_t(-1)) : id.get<int64_t>());
  }
  return out;
}

// An OpenAI error object's message, else the whole of it.
std::string ErrorMessage(const json& error) {
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  return error.dump();
}

Status Send(Endpoint& ep, const TraceRequest& t, const std::string& model, RequestResult* m) {
  const auto sent = BenchClock::now();
  SseReader sse(sent);
  PREFIXD_ASSIGN_OR_RETURN(
      int status, ep.PostStream("/v1/chat/completions", ChatBody(t, model, t.max_tokens, true),
                                [&](const char* d, size_t n) { return sse.Feed(d, n); }));
  m->total_ms = MillisBetween(sent, BenchClock::now());
  const StreamStats& s = sse.stats();
  // llama-server parses the answer with the template's own parser once it is generated; on a
  // random-weight model that parse can fail (gpt-oss's harmony channels, DeepSeek-V3.2), and
  // the stream then ends with an error event instead of the usage. The prompt was processed
  // and cached all the same, and the first chunk's timings say how: keep the request, note why
  // it has no answer.
  const bool answer_rejected = status == 200 && !s.error.is_null() && s.usage.is_null() &&
                               s.first_choice_ms && s.timings.is_object() &&
                               s.timings.contains("prompt_n");
  if (answer_rejected) {
    m->answer_error = ErrorMessage(s.error);
    Progress("request %zu: the server processed the prompt, then rejected its answer (%s); "
             "prompt numbers from its timings", m->index, m->answer_error.c_str());
  } else if (status != 200 || !s.error.is_null() || s.usage.is_null()) {
    // The server's own error event when it sent one (llama-server streams a failure as a
    // `data: {"error": ...}` event after the first chunks), else the start of the body.
    const std::string why = !s.error.is_null() ? "error event " + s.error.dump()
                            : s.usage.is_null() && status == 200
                                ? "the stream ended without usage; it began: " + s.raw_head
                                : s.raw_head;
    return Status::IOError("chat request " + std::to_string(m->index) + ": HTTP " +
                           std::to_string(status) + ": " + why);
  }
  m->ttft_ms = s.first_choice_ms.value_or(m->total_ms);
  ReadServerNumbers(s, m);
  return Status::OK();
}

void LogRow(const RequestResult& m, size_t n, const std::string& label) {
  const std::string flags = TraceFlagsToString(m.flags);
  Progress("%s %zu/%zu sess %d %-8s prompt %lld reusable %lld cached %lld evaluated %lld "
           "TTFT %.0f ms outside %.0f ms", label.c_str(), m.index + 1, n, m.session,
           flags.empty() ? "-" : flags.c_str(), (long long)m.prompt, (long long)m.reusable,
           (long long)m.cached, (long long)m.evaluated, m.ttft_ms, m.OutsideMs());
}

}  // namespace

namespace {

// One server's side of a replay: its run and the token ids of every earlier prompt it saw
// (shared by both servers when they alternate: reusable is then what either one saw).
struct ReplaySide {
  ServerUnderTest& server;
  ReplayRun* run;
  std::vector<std::vector<int64_t>>* seen;
};

Status ApplyRestart(ReplaySide& side, const TraceRequest& t, RequestResult* m) {
  if (!(t.flags & kTraceRestart)) return Status::OK();
  if (!side.server.launched()) {
    Progress("restart marker at request %zu: the server was not launched by the bench "
             "(--server-cmd), so it is not restarted", m->index);
    return Status::OK();
  }
  Progress("restart marker at request %zu: stopping and starting the server", m->index);
  PREFIXD_RETURN_IF_ERROR(side.server.Restart());
  side.run->restarted = m->restarted = true;
  return Status::OK();
}

// Request i of the trace against one side.
Status Step(ReplaySide& side, const std::vector<TraceRequest>& trace, size_t i) {
  const TraceRequest& t = trace[i];
  RequestResult m;
  m.index = i;
  m.session = t.session;
  m.turn = t.turn;
  m.flags = t.flags;
  PREFIXD_RETURN_IF_ERROR(ApplyRestart(side, t, &m));
  const std::string& model = side.server.options().model;
  auto tokens = PromptTokens(side.server.endpoint(), t, model);
  if (!tokens.ok()) {
    Progress("request %zu: no token ids (%s); reusable unknown", i,
             tokens.status().ToString().c_str());
  }
  const std::string& decode_log = side.server.options().decode_log;
  const int64_t mark = decode_log.empty() ? 0 : DecodeLogMark(decode_log);
  PREFIXD_RETURN_IF_ERROR(Send(side.server.endpoint(), t, model, &m));
  if (!decode_log.empty()) {
    const PrefillCount count = CountPrefill(decode_log, mark);
    m.counted_calls = count.calls;
    m.counted_ubatches = count.ubatches;
  }
  if (tokens.ok()) {
    m.reusable = std::min(LongestSharedPrefix(*side.seen, *tokens),
                          std::max<int64_t>(m.prompt - 1, 0));
    side.seen->push_back(std::move(*tokens));
  }
  LogRow(m, trace.size(), side.server.options().label);
  side.run->rows.push_back(m);
  return Status::OK();
}

}  // namespace

Status Replay(ServerUnderTest& server, const std::vector<TraceRequest>& trace, ReplayRun* run) {
  std::vector<std::vector<int64_t>> seen;
  ReplaySide side{server, run, &seen};
  for (size_t i = 0; i < trace.size(); ++i) PREFIXD_RETURN_IF_ERROR(Step(side, trace, i));
  return Status::OK();
}

Status ReplaySideBySide(ServerUnderTest& a, ServerUnderTest& b,
                        const std::vector<TraceRequest>& trace, ReplayRun* run_a,
                        ReplayRun* run_b) {
  std::vector<std::vector<int64_t>> seen_a, seen_b;
  ReplaySide sa{a, run_a, &seen_a}, sb{b, run_b, &seen_b};
  for (size_t i = 0; i < trace.size(); ++i) {
    ReplaySide& first = i % 2 == 0 ? sa : sb;
    ReplaySide& second = i % 2 == 0 ? sb : sa;
    PREFIXD_RETURN_IF_ERROR(Step(first, trace, i));
    PREFIXD_RETURN_IF_ERROR(Step(second, trace, i));
  }
  return Status::OK();
}

Status ReplayAlternating(ServerUnderTest& a, ServerUnderTest& b,
                         const std::vector<TraceRequest>& trace, ReplayRun* run) {
  std::vector<std::vector<int64_t>> seen;
  ReplaySide sa{a, run, &seen}, sb{b, run, &seen};
  for (size_t i = 0; i < trace.size(); ++i) {
    PREFIXD_RETURN_IF_ERROR(Step(i % 2 == 0 ? sa : sb, trace, i));
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// Totals and reports of one run.

namespace {

struct Totals {
  int64_t requests = 0, prompt = 0, reusable = 0, cached = 0, evaluated = 0;
  double ttft_ms = 0, total_ms = 0, outside_ms = 0;
  void Add(const RequestResult& m) {
    ++requests;
    prompt += m.prompt;
    reusable += std::max<int64_t>(m.reusable, 0);
    cached += m.cached;
    evaluated += m.evaluated;
    ttft_ms += m.ttft_ms;
    total_ms += m.total_ms;
    outside_ms += std::max(m.OutsideMs(), 0.0);
  }
  json ToJson() const {
    return {{"requests", requests},
            {"prompt_tokens", prompt},
            {"reusable_tokens", reusable},
            {"cached_tokens", cached},
            {"evaluated_tokens", evaluated},
            {"reuse_ratio", SafeRatio(double(cached), double(reusable))},
            {"ttft_ms_total", ttft_ms},
            {"ttft_ms_mean", SafeRatio(ttft_ms, double(requests))},
            {"request_ms_total", total_ms},
            {"outside_ms_total", outside_ms}};
  }
};

}  // namespace

json ResultsJson(const json& meta, const std::vector<RequestResult>& rows, bool restarted) {
  Totals all, from_restart;
  bool after = false;
  json requests = json::array();
  for (const RequestResult& m : rows) {
    after = after || m.restarted;
    all.Add(m);
    if (after) from_restart.Add(m);
    requests.push_back(ToJson(m));
  }
  json j = meta;
  j["restarted"] = restarted;
  j["requests"] = requests;
  j["totals"] = all.ToJson();
  j["from_restart"] = restarted ? from_restart.ToJson() : json(nullptr);
  return j;
}

std::string SingleMarkdown(const json& r) {
  std::ostringstream md;
  md << "# prefixd bench: " << r.value("label", std::string("server")) << "\n\n"
     << "| # | sess | flags | prompt | reusable | cached | evaluated | TTFT ms | outside ms |\n"
     << "|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (const json& q : r["requests"]) {
    const std::string f = q.value("flags", std::string());
    md << "| " << Num(q, "index") << " | " << Num(q, "session") << " | " << (f.empty() ? "-" : f)
       << " | " << Num(q, "prompt_tokens") << " | " << Num(q, "reusable_tokens") << " | "
       << Num(q, "cached_tokens") << " | " << Num(q, "evaluated_tokens") << " | "
       << Fixed(q.value("ttft_ms", 0.0)) << " | " << Fixed(q.value("outside_ms", -1.0))
       << " |\n";
  }
  const json& t = r["totals"];
  md << "\nreuse (cached / reusable): " << Num(t, "cached_tokens") << " / "
     << Num(t, "reusable_tokens") << " = " << Pct(t.value("reuse_ratio", 0.0))
     << "; mean TTFT " << Fixed(t.value("ttft_ms_mean", 0.0)) << " ms\n";
  if (r["from_restart"].is_object()) {
    const json& f = r["from_restart"];
    md << "from the restart on: " << Num(f, "cached_tokens") << " / "
       << Num(f, "reusable_tokens") << " = " << Pct(f.value("reuse_ratio", 0.0)) << "\n";
  }
  return md.str();
}

void PrintSummary(const json& r) {
  const json& t = r["totals"];
  std::printf("%s: %lld requests, prompt %lld, reusable %lld, cached %lld (reuse %s), "
              "evaluated %lld, mean TTFT %.0f ms\n",
              r.value("label", std::string("server")).c_str(),
              (long long)t.value("requests", 0LL), (long long)t.value("prompt_tokens", 0LL),
              (long long)t.value("reusable_tokens", 0LL), (long long)t.value("cached_tokens", 0LL),
              Pct(t.value("reuse_ratio", 0.0)).c_str(), (long long)t.value("evaluated_tokens", 0LL),
              t.value("ttft_ms_mean", 0.0));
  if (r["from_restart"].is_object()) {
    const json& f = r["from_restart"];
    std::printf("  from the restart on: cached %lld of reusable %lld (reuse %s)\n",
                (long long)f.value("cached_tokens", 0LL), (long long)f.value("reusable_tokens", 0LL),
                Pct(f.value("reuse_ratio", 0.0)).c_str());
  }
}

// --combine A.json,B.json: both servers side by side.

namespace {

struct Side {
  json r;
  std::string name;
};

// B re-prefilled a request when it evaluated more than `slack` tokens beyond what was not
// reusable (it lost reusable tokens).
bool Reprefilled(const json& q, int64_t slack) {
  return q.value("evaluated_tokens", 0LL) >
         q.value("prompt_tokens", 0LL) - q.value("reusable_tokens", 0LL) + slack;
}

json Headline(const Side& A, const Side& B, int64_t slack, std::vector<std::string>* notes) {
  const json& ra = A.r["requests"];
  const json& rb = B.r["requests"];
  int64_t reprefills = 0, slower = 0;
  for (size_t i = 0; i < std::min(ra.size(), rb.size()); ++i) {
    if (!Reprefilled(rb[i], slack)) continue;
    ++reprefills;
    if (ra[i].value("ttft_ms", 0.0) > rb[i].value("ttft_ms", 0.0)) {
      ++slower;
      notes->push_back("request " + std::to_string(i) + ": " + A.name + " TTFT " +
                       Fixed(ra[i].value("ttft_ms", 0.0)) + " ms > " + B.name + " " +
                       Fixed(rb[i].value("ttft_ms", 0.0)) + " ms although " + B.name +
                       " re-prefilled");
    }
  }
  auto ratio = [](const json& r, const char* part) {
    return r[part].is_object() ? json(r[part].value("reuse_ratio", 0.0)) : json(nullptr);
  };
  const double ta = A.r["totals"].value("ttft_ms_mean", 0.0);
  const double tb = B.r["totals"].value("ttft_ms_mean", 0.0);
  return {{"a", A.name},
          {"b", B.name},
          {"reuse_ratio_a", ratio(A.r, "totals")},
          {"reuse_ratio_b", ratio(B.r, "totals")},
          {"reuse_ratio_after_restart_a", ratio(A.r, "from_restart")},
          {"reuse_ratio_after_restart_b", ratio(B.r, "from_restart")},
          {"ttft_ms_mean_a", ta},
          {"ttft_ms_mean_b", tb},
          {"ttft_ratio_a_over_b", SafeRatio(ta, tb)},
          {"requests_b_reprefilled", reprefills},
          {"requests_b_reprefilled_a_slower", slower}};
}

std::string RatioCell(const json& v) { return v.is_number() ? Pct(v.get<double>()) : "n/a"; }

std::string CombinedMarkdown(const Side& A, const Side& B, const json& h,
                             const std::vector<std::string>& notes, const std::string& title) {
  std::ostringstream md;
  md << "# " << (title.empty() ? A.name + " vs " + B.name : title) << "\n\n"
     << "| | " << A.name << " | " << B.name << " |\n|---|---:|---:|\n"
     << "| reuse (cached / reusable) | " << RatioCell(h["reuse_ratio_a"]) << " | "
     << RatioCell(h["reuse_ratio_b"]) << " |\n"
     << "| reuse from the restart on | " << RatioCell(h["reuse_ratio_after_restart_a"]) << " | "
     << RatioCell(h["reuse_ratio_after_restart_b"]) << " |\n"
     << "| mean TTFT ms | " << Fixed(h["ttft_ms_mean_a"].get<double>()) << " | "
     << Fixed(h["ttft_ms_mean_b"].get<double>()) << " |\n"
     << "| evaluated prompt tokens | " << Num(A.r["totals"], "evaluated_tokens") << " | "
     << Num(B.r["totals"], "evaluated_tokens") << " |\n\n"
     << "TTFT ratio " << A.name << " / " << B.name << ": "
     << Fixed(h["ttft_ratio_a_over_b"].get<double>(), 3) << ". " << B.name
     << " re-prefilled " << h["requests_b_reprefilled"].get<int64_t>() << " requests; "
     << A.name << " was slower on " << h["requests_b_reprefilled_a_slower"].get<int64_t>()
     << " of them.\n\n";
  md << "| # | sess | flags | prompt | reusable | cached " << A.name << " | cached " << B.name
     << " | eval " << A.name << " | eval " << B.name << " | TTFT ms " << A.name << " | TTFT ms "
     << B.name << " | TTFT ratio |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  const json& ra = A.r["requests"];
  const json& rb = B.r["requests"];
  for (size_t i = 0; i < std::min(ra.size(), rb.size()); ++i) {
    const json &qa = ra[i], &qb = rb[i];
    const std::string f = qa.value("flags", std::string());
    md << "| " << i << " | " << Num(qa, "session") << " | " << (f.empty() ? "-" : f) << " | "
       << Num(qa, "prompt_tokens") << " | " << Num(qa, "reusable_tokens") << " | "
       << Num(qa, "cached_tokens") << " | " << Num(qb, "cached_tokens") << " | "
       << Num(qa, "evaluated_tokens") << " | " << Num(qb, "evaluated_tokens") << " | "
       << Fixed(qa.value("ttft_ms", 0.0)) << " | " << Fixed(qb.value("ttft_ms", 0.0)) << " | "
       << Fixed(SafeRatio(qa.value("ttft_ms", 0.0), qb.value("ttft_ms", 0.0)), 2) << " |\n";
  }
  if (!notes.empty()) {
    md << "\n";
    for (const std::string& n : notes) md << "- " << n << "\n";
  }
  return md.str();
}

// index, evaluated A, evaluated B, TTFT A (s), TTFT B (s): gnuplot's input.
std::string CombinedTsv(const Side& A, const Side& B) {
  std::ostringstream t;
  t << "# index\teval_" << A.name << "\teval_" << B.name << "\tttft_s_" << A.name << "\tttft_s_"
    << B.name << "\treusable\tflags\n";
  const json& ra = A.r["requests"];
  const json& rb = B.r["requests"];
  for (size_t i = 0; i < std::min(ra.size(), rb.size()); ++i) {
    const std::string f = ra[i].value("flags", std::string());
    t << i << "\t" << Num(ra[i], "evaluated_tokens") << "\t" << Num(rb[i], "evaluated_tokens")
      << "\t" << Fixed(ra[i].value("ttft_ms", 0.0) / 1000, 3) << "\t"
      << Fixed(rb[i].value("ttft_ms", 0.0) / 1000, 3) << "\t" << Num(ra[i], "reusable_tokens")
      << "\t" << (f.empty() ? "-" : f) << "\n";
  }
  return t.str();
}

Result<Side> LoadSide(const std::string& path) {
  PREFIXD_ASSIGN_OR_RETURN(json r, ReadJsonFile(path));
  if (!r.contains("requests") || !r.contains("totals")) {
    return Status::InvalidArgument(path + ": not a prefixd bench results file");
  }
  std::string name = r.value("label", std::string());
  if (name.empty()) name = path;
  return Side{std::move(r), name};
}

}  // namespace

Status Combine(const CombineOptions& a) {
  PREFIXD_ASSIGN_OR_RETURN(Side A, LoadSide(a.a_path));
  PREFIXD_ASSIGN_OR_RETURN(Side B, LoadSide(a.b_path));
  if (A.r["requests"].size() != B.r["requests"].size()) {
    return Status::InvalidArgument("--combine: the two runs have different request counts");
  }
  std::vector<std::string> notes;
  json h = Headline(A, B, a.reprefill_slack, &notes);
  h["notes"] = notes;
  const std::string md = CombinedMarkdown(A, B, h, notes, a.title);
  if (!a.out.empty()) {
    PREFIXD_RETURN_IF_ERROR(
        WriteTextFile(a.out, json({{"headline", h}, {"a", A.r}, {"b", B.r}}).dump(2)));
  }
  if (!a.md.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(a.md, md));
  if (!a.tsv.empty()) PREFIXD_RETURN_IF_ERROR(WriteTextFile(a.tsv, CombinedTsv(A, B)));
  std::fputs(md.c_str(), stdout);
  return Status::OK();
}

}  // namespace prefixd::bench
