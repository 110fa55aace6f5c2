// prefixd bench: replays an agent trace (bench/trace.h; read from JSONL or generated from flags)
// against any OpenAI-compatible endpoint — prefixd serve, llama-server, … — and reports per
// request and in total what the server's prompt cache reused against what was reusable, and the
// time to first token. With --server-cmd the bench launches the server itself, and stops and
// starts it again at the trace's restart marker. `--combine A.json,B.json` puts two result files
// side by side (reuse ratios, TTFT ratio). docs/bench.md describes the outputs.
//
// How it measures, per request:
//   tokens     POST /apply-template {messages, tools}: prefixd answers with "tokens" (the exact
//              ids the chat route evaluates); otherwise the "prompt" text is tokenized with
//              POST /tokenize {content, add_special: true, parse_special: true}, as llama-server
//              tokenizes a chat prompt. Not timed.
//   reusable   the longest token prefix shared with any earlier prompt of the replay, capped at
//              prompt_tokens - 1 (as prefixd_engine_bench computes it).
//   request    POST /v1/chat/completions, stream: true, stream_options.include_usage: TTFT is the
//              time from sending to the first SSE event that carries a choice; cached tokens come
//              from usage.prompt_tokens_details.cached_tokens, else timings.cache_n; evaluated
//              tokens from timings.prompt_n, else prompt_tokens - cached.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/trace.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace prefixd::cli {
namespace {

using json = nlohmann::json;
using bench::TraceRequest;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  std::string model;  // "model" sent in requests; "" leaves it out
  std::string label;  // the server's name in the report
  std::string server_cmd;
  std::string server_log;
  int64_t start_timeout_s = 600;
  int64_t request_timeout_s = 3600;
  std::string trace;
  std::string trace_out;
  int64_t sessions = 3;
  int64_t turns = 3;
  int64_t system_tokens = 1000;
  int64_t tool_tokens = 150;
  int64_t max_tokens = 8;
  int64_t seed = 1;
  bool no_restart = false;
  bool no_branch = false;
  bool no_warmup = false;
  bool trace_only = false;
  int64_t reprefill_slack = 256;
  std::string out;
  std::string md;
  std::string combine;
  std::string tsv;
  std::string title;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

std::string Now() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
  return buf;
}

template <typename... A>
void Progress(const char* fmt, A... args) {
  std::fprintf(stderr, "[%s] bench: ", Now().c_str());
  std::fprintf(stderr, fmt, args...);
  std::fputc('\n', stderr);
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return Status::IOError("cannot write " + path);
  return Status::OK();
}

Result<json> ReadJsonFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IOError("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Status::InvalidArgument(path + ": not valid JSON");
  return j;
}

// ---------------------------------------------------------------------------------------------
// The endpoint: an HTTP client bound to --url, with the API key on every request.

class Endpoint {
 public:
  Endpoint(const std::string& url, const std::string& api_key, int64_t timeout_s)
      : client_(url) {
    client_.set_connection_timeout(5, 0);
    client_.set_read_timeout(time_t(timeout_s), 0);
    client_.set_write_timeout(60, 0);
    if (!api_key.empty()) headers_.emplace("Authorization", "Bearer " + api_key);
  }
  bool valid() const { return client_.is_valid(); }

  // The body of a 200 answer to POST path, as JSON.
  Result<json> PostJson(const std::string& path, const json& body) {
    auto r = client_.Post(path, headers_, body.dump(), "application/json");
    if (!r) return Status::IOError("POST " + path + ": " + httplib::to_string(r.error()));
    if (r->status != 200) {
      return Status::IOError("POST " + path + ": HTTP " + std::to_string(r->status) + " " +
                             r->body.substr(0, 300));
    }
    json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded()) return Status::IOError("POST " + path + ": the answer is not JSON");
    return j;
  }

  bool Healthy() {
    auto r = client_.Get("/health", headers_);
    return r && r->status == 200;
  }

  // POST path with a streamed answer: `on_data` gets each chunk of the body as it arrives.
  Result<int> PostStream(const std::string& path, const json& body,
                         const std::function<bool(const char*, size_t)>& on_data) {
    auto r = client_.Post(path, headers_, body.dump(), "application/json", on_data);
    if (!r) return Status::IOError("POST " + path + ": " + httplib::to_string(r.error()));
    return r->status;
  }

 private:
  httplib::Client client_;
  httplib::Headers headers_;
};

// ---------------------------------------------------------------------------------------------
// A server the bench launches (--server-cmd): `sh -c CMD` in its own process group, output
// appended to --server-log. Stop() sends SIGTERM to the group (prefixd flushes its disk tier
// then), and SIGKILL after 120 s.

class ServerProcess {
 public:
  ServerProcess(std::string cmd, std::string log) : cmd_(std::move(cmd)), log_(std::move(log)) {}
  ~ServerProcess() { Stop(); }

  Status Start(Endpoint& ep, int64_t timeout_s) {
    Progress("starting server: %s", cmd_.c_str());
    pid_ = fork();
    if (pid_ < 0) return Status::IOError("fork failed");
    if (pid_ == 0) ExecChild();
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::IOError("the server exited during start (status " +
                               std::to_string(status) + "); see " +
                               (log_.empty() ? std::string("its output") : log_));
      }
      if (ep.Healthy()) return Status::OK();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    Stop();
    return Status::IOError("the server did not answer /health within " +
                           std::to_string(timeout_s) + " s");
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    pid_ = -1;
  }

 private:
  [[noreturn]] void ExecChild() {
    setpgid(0, 0);
    if (!log_.empty()) {
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
    }
    execl("/bin/sh", "sh", "-c", cmd_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }

  std::string cmd_;
  std::string log_;
  pid_t pid_ = -1;
};

// ---------------------------------------------------------------------------------------------
// One request.

struct Measured {
  size_t index = 0;
  int session = 0;
  int turn = 0;
  std::string flags;
  int64_t prompt = 0, reusable = -1, cached = 0, evaluated = 0, completion = 0;
  double ttft_ms = 0, total_ms = 0, prompt_ms = -1;
  bool restarted = false;  // the server was restarted right before this request
};

json ToJson(const Measured& m) {
  return {{"index", m.index},         {"session", m.session},     {"turn", m.turn},
          {"flags", m.flags},         {"prompt_tokens", m.prompt}, {"reusable_tokens", m.reusable},
          {"cached_tokens", m.cached}, {"evaluated_tokens", m.evaluated},
          {"completion_tokens", m.completion}, {"ttft_ms", m.ttft_ms},
          {"total_ms", m.total_ms},   {"server_prompt_ms", m.prompt_ms},
          {"restarted_before", m.restarted}};
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
  }
  return body;
}

// The prompt's token ids as the server sees them (see the file comment).
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
  for (const json& id : ids) out.push_back(id.is_object() ? id.value("id", int64_t(-1)) : id.get<int64_t>());
  return out;
}

int64_t Reusable(const std::vector<std::vector<int64_t>>& earlier,
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

// Splits an SSE body into events and reads TTFT, usage and timings from them.
class SseReader {
 public:
  explicit SseReader(Clock::time_point sent) : sent_(sent) {}

  bool Feed(const char* data, size_t n) {
    buf_.append(data, n);
    size_t end;
    while ((end = buf_.find("\n\n")) != std::string::npos) {
      OnEvent(buf_.substr(0, end));
      buf_.erase(0, end + 2);
    }
    return true;
  }

  std::optional<double> ttft_ms;
  json usage, timings, error;
  std::string raw_head;  // the first bytes, for error messages

 private:
  void OnEvent(const std::string& ev) {
    if (raw_head.size() < 300) raw_head += ev.substr(0, 300 - raw_head.size());
    for (size_t pos = 0; pos < ev.size();) {
      size_t eol = ev.find('\n', pos);
      if (eol == std::string::npos) eol = ev.size();
      std::string line = ev.substr(pos, eol - pos);
      pos = eol + 1;
      if (line.rfind("data:", 0) != 0) continue;
      std::string payload = line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
      if (payload == "[DONE]") continue;
      OnData(json::parse(payload, nullptr, false));
    }
  }

  void OnData(const json& j) {
    if (!j.is_object()) return;
    if (j.contains("error")) error = j["error"];
    if (!ttft_ms && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      ttft_ms = Ms(Clock::now() - sent_);
    }
    if (j.contains("usage") && j["usage"].is_object()) usage = j["usage"];
    if (j.contains("timings") && j["timings"].is_object()) timings = j["timings"];
  }

  Clock::time_point sent_;
  std::string buf_;
};

int64_t IntAt(const json& j, const char* key, int64_t fallback) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<int64_t>()
                                                                  : fallback;
}

Status Send(Endpoint& ep, const TraceRequest& t, const std::string& model, Measured* m) {
  const auto sent = Clock::now();
  SseReader sse(sent);
  PREFIXD_ASSIGN_OR_RETURN(
      int status, ep.PostStream("/v1/chat/completions", ChatBody(t, model, t.max_tokens, true),
                                [&](const char* d, size_t n) { return sse.Feed(d, n); }));
  m->total_ms = Ms(Clock::now() - sent);
  if (status != 200 || !sse.error.is_null() || sse.usage.is_null()) {
    return Status::IOError("chat request " + std::to_string(m->index) + ": HTTP " +
                           std::to_string(status) + ": " + sse.raw_head);
  }
  m->ttft_ms = sse.ttft_ms.value_or(m->total_ms);
  m->prompt = IntAt(sse.usage, "prompt_tokens", 0);
  m->completion = IntAt(sse.usage, "completion_tokens", 0);
  const json details = sse.usage.value("prompt_tokens_details", json::object());
  m->cached = IntAt(details, "cached_tokens", IntAt(sse.timings, "cache_n", 0));
  m->evaluated = IntAt(sse.timings, "prompt_n", m->prompt - m->cached);
  if (sse.timings.is_object() && sse.timings.contains("prompt_ms")) {
    m->prompt_ms = sse.timings["prompt_ms"].get<double>();
  }
  return Status::OK();
}

// One short request that shares nothing with the trace, so that first-use costs (graph
// allocation, threads) are not charged to the first measured request.
void WarmUp(Endpoint& ep, const std::string& model) {
  json body = {{"prompt", "Warm up: one two three four five six seven."},
               {"max_tokens", 1},
               {"temperature", 0}};
  if (!model.empty()) body["model"] = model;
  auto r = ep.PostJson("/v1/completions", body);
  if (!r.ok()) Progress("warm-up failed (ignored): %s", r.status().ToString().c_str());
}

// ---------------------------------------------------------------------------------------------
// Totals and reports.

struct Totals {
  int64_t requests = 0, prompt = 0, reusable = 0, cached = 0, evaluated = 0;
  double ttft_ms = 0;
  void Add(const Measured& m) {
    ++requests;
    prompt += m.prompt;
    reusable += std::max<int64_t>(m.reusable, 0);
    cached += m.cached;
    evaluated += m.evaluated;
    ttft_ms += m.ttft_ms;
  }
  json ToJson() const {
    return {{"requests", requests},   {"prompt_tokens", prompt},
            {"reusable_tokens", reusable}, {"cached_tokens", cached},
            {"evaluated_tokens", evaluated}, {"reuse_ratio", Ratio(double(cached), double(reusable))},
            {"ttft_ms_total", ttft_ms}, {"ttft_ms_mean", Ratio(ttft_ms, double(requests))}};
  }
};

json ResultsJson(const BenchArgs& a, const std::vector<Measured>& rows, bool restarted) {
  Totals all, from_restart;
  bool after = false;
  json requests = json::array();
  for (const Measured& m : rows) {
    after = after || m.restarted;
    all.Add(m);
    if (after) from_restart.Add(m);
    requests.push_back(ToJson(m));
  }
  json j = {{"label", a.label},
            {"url", a.url},
            {"server_cmd", a.server_cmd},
            {"trace", a.trace},
            {"restarted", restarted},
            {"requests", requests},
            {"totals", all.ToJson()}};
  j["from_restart"] = restarted ? from_restart.ToJson() : json(nullptr);
  return j;
}

std::string Pct(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * r);
  return buf;
}
std::string Fixed(double v, int digits = 0) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
std::string Num(const json& j, const char* key) { return std::to_string(j.value(key, int64_t(0))); }

std::string SingleMarkdown(const json& r) {
  std::ostringstream md;
  md << "# prefixd bench: " << r.value("label", std::string("server")) << "\n\n"
     << "| # | sess | flags | prompt | reusable | cached | evaluated | TTFT ms |\n"
     << "|---:|---:|---|---:|---:|---:|---:|---:|\n";
  for (const json& q : r["requests"]) {
    const std::string f = q.value("flags", std::string());
    md << "| " << Num(q, "index") << " | " << Num(q, "session") << " | " << (f.empty() ? "-" : f)
       << " | " << Num(q, "prompt_tokens") << " | " << Num(q, "reusable_tokens") << " | "
       << Num(q, "cached_tokens") << " | " << Num(q, "evaluated_tokens") << " | "
       << Fixed(q.value("ttft_ms", 0.0)) << " |\n";
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

// ---------------------------------------------------------------------------------------------
// The replay.

Result<std::vector<TraceRequest>> LoadTrace(const BenchArgs& a) {
  if (!a.trace.empty()) return bench::ReadTraceJsonl(a.trace);
  bench::TraceOptions o;
  o.seed = uint64_t(a.seed);
  o.n_sessions = int(a.sessions);
  o.turns_per_session = int(a.turns);
  o.system_tokens = int(a.system_tokens);
  o.tool_tokens = int(a.tool_tokens);
  o.max_tokens = int(a.max_tokens);
  o.branch = !a.no_branch;
  o.restart = !a.no_restart;
  PREFIXD_ASSIGN_OR_RETURN(auto trace, bench::GenerateTrace(o));
  if (!a.trace_out.empty()) PREFIXD_RETURN_IF_ERROR(bench::WriteTraceJsonl(a.trace_out, trace));
  return trace;
}

struct Replay {
  const BenchArgs& a;
  Endpoint ep;
  std::optional<ServerProcess> server;
  std::vector<std::vector<int64_t>> seen;  // token ids of every earlier prompt
  std::vector<Measured> rows;
  bool restarted = false;

  explicit Replay(const BenchArgs& args)
      : a(args), ep(args.url, args.api_key, args.request_timeout_s) {}

  Status StartServer() {
    PREFIXD_RETURN_IF_ERROR(server->Start(ep, a.start_timeout_s));
    if (!a.no_warmup) WarmUp(ep, a.model);
    return Status::OK();
  }

  Status Restart(Measured* m) {
    if (!server) {
      Progress("restart marker at request %zu: the server was not launched by the bench "
               "(--server-cmd), so it is not restarted", m->index);
      return Status::OK();
    }
    Progress("restart marker at request %zu: stopping and starting the server", m->index);
    server->Stop();
    PREFIXD_RETURN_IF_ERROR(StartServer());
    restarted = m->restarted = true;
    return Status::OK();
  }

  Status One(size_t i, const TraceRequest& t, size_t n) {
    Measured m;
    m.index = i;
    m.session = t.session;
    m.turn = t.turn;
    m.flags = bench::TraceFlagsToString(t.flags);
    if (t.flags & bench::kTraceRestart) PREFIXD_RETURN_IF_ERROR(Restart(&m));
    auto tokens = PromptTokens(ep, t, a.model);
    if (!tokens.ok()) {
      Progress("request %zu: no token ids (%s); reusable unknown", i,
               tokens.status().ToString().c_str());
    }
    PREFIXD_RETURN_IF_ERROR(Send(ep, t, a.model, &m));
    if (tokens.ok()) {
      m.reusable = std::min(Reusable(seen, *tokens), std::max<int64_t>(m.prompt - 1, 0));
      seen.push_back(std::move(*tokens));
    }
    Progress("%zu/%zu sess %d %-8s prompt %lld reusable %lld cached %lld evaluated %lld "
             "TTFT %.0f ms", i + 1, n, t.session, m.flags.empty() ? "-" : m.flags.c_str(),
             (long long)m.prompt, (long long)m.reusable, (long long)m.cached,
             (long long)m.evaluated, m.ttft_ms);
    rows.push_back(m);
    return Status::OK();
  }

  Status Run(const std::vector<TraceRequest>& trace) {
    if (!ep.valid()) return Status::InvalidArgument("--url: cannot use '" + a.url + "'");
    if (!a.server_cmd.empty()) {
      server.emplace(a.server_cmd, a.server_log);
      PREFIXD_RETURN_IF_ERROR(StartServer());
    } else if (!a.no_warmup) {
      WarmUp(ep, a.model);
    }
    for (size_t i = 0; i < trace.size(); ++i) PREFIXD_RETURN_IF_ERROR(One(i, trace[i], trace.size()));
    if (server) server->Stop();
    return Status::OK();
  }
};

// ---------------------------------------------------------------------------------------------
// --combine A.json,B.json: both servers side by side.

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
          {"ttft_ratio_a_over_b", Ratio(ta, tb)},
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
       << Fixed(Ratio(qa.value("ttft_ms", 0.0), qb.value("ttft_ms", 0.0)), 2) << " |\n";
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

Status Combine(const BenchArgs& a) {
  const size_t comma = a.combine.find(',');
  if (comma == std::string::npos) return Status::InvalidArgument("--combine: A.json,B.json");
  PREFIXD_ASSIGN_OR_RETURN(Side A, LoadSide(a.combine.substr(0, comma)));
  PREFIXD_ASSIGN_OR_RETURN(Side B, LoadSide(a.combine.substr(comma + 1)));
  if (A.r["requests"].size() != B.r["requests"].size()) {
    return Status::InvalidArgument("--combine: the two runs have different request counts");
  }
  std::vector<std::string> notes;
  json h = Headline(A, B, a.reprefill_slack, &notes);
  h["notes"] = notes;
  const std::string md = CombinedMarkdown(A, B, h, notes, a.title);
  if (!a.out.empty()) {
    PREFIXD_RETURN_IF_ERROR(WriteFile(a.out, json({{"headline", h}, {"a", A.r}, {"b", B.r}})
                                                 .dump(2)));
  }
  if (!a.md.empty()) PREFIXD_RETURN_IF_ERROR(WriteFile(a.md, md));
  if (!a.tsv.empty()) PREFIXD_RETURN_IF_ERROR(WriteFile(a.tsv, CombinedTsv(A, B)));
  std::fputs(md.c_str(), stdout);
  return Status::OK();
}

Status RunBench(BenchArgs a) {
  if (!a.combine.empty()) return Combine(a);
  if (a.label.empty()) a.label = a.url;
  PREFIXD_ASSIGN_OR_RETURN(auto trace, LoadTrace(a));
  if (a.trace_only) {
    if (a.trace_out.empty()) return Status::InvalidArgument("--trace-only needs --trace-out");
    Progress("%zu requests written to %s", trace.size(), a.trace_out.c_str());
    return Status::OK();
  }
  Progress("%zu requests against %s (%s)", trace.size(), a.url.c_str(), a.label.c_str());
  Replay replay(a);
  Status st = replay.Run(trace);
  json r = ResultsJson(a, replay.rows, replay.restarted);
  if (!st.ok()) r["error"] = st.ToString();
  if (!a.out.empty()) PREFIXD_RETURN_IF_ERROR(WriteFile(a.out, r.dump(2)));
  if (!a.md.empty()) PREFIXD_RETURN_IF_ERROR(WriteFile(a.md, SingleMarkdown(r)));
  PrintSummary(r);
  return st;
}

}  // namespace

int CmdBench(int argc, char** argv) {
  BenchArgs a;
  Flags flags("bench",
              "Replay an agent trace against an OpenAI-compatible endpoint and report prompt "
              "reuse and TTFT (docs/bench.md).");
  flags.String("--url", &a.url, "the endpoint's base URL");
  flags.String("--api-key", &a.api_key, "sent as Authorization: Bearer KEY");
  flags.String("--model", &a.model, "\"model\" of every request ('' leaves it out)");
  flags.String("--label", &a.label, "the server's name in the report (default: the URL)");
  flags.String("--server-cmd", &a.server_cmd,
               "launch this shell command as the server (listening at --url), wait for /health, "
               "restart it at the trace's restart marker, stop it at the end");
  flags.String("--server-log", &a.server_log, "append the launched server's output here");
  flags.Int("--start-timeout", &a.start_timeout_s, "seconds to wait for /health after a start");
  flags.Int("--request-timeout", &a.request_timeout_s, "seconds one request may take");
  flags.String("--trace", &a.trace, "replay this JSONL trace instead of generating one");
  flags.String("--trace-out", &a.trace_out, "write the generated trace as JSONL here");
  flags.Bool("--trace-only", &a.trace_only, "write the generated trace (--trace-out) and exit");
  flags.Int("--sessions", &a.sessions, "generated trace: agent sessions");
  flags.Int("--turns", &a.turns, "generated trace: requests per session");
  flags.Int("--system-tokens", &a.system_tokens, "generated trace: system prompt, approx tokens");
  flags.Int("--tool-tokens", &a.tool_tokens, "generated trace: one tool result, approx tokens");
  flags.Int("--max-tokens", &a.max_tokens, "generated trace: tokens generated per request");
  flags.Int("--seed", &a.seed, "generated trace: seed");
  flags.Bool("--no-restart", &a.no_restart, "generated trace: no restart marker");
  flags.Bool("--no-branch", &a.no_branch, "generated trace: no branch request");
  flags.Bool("--no-warmup", &a.no_warmup, "skip the warm-up request after each server start");
  flags.String("--out", &a.out, "write the results as JSON here");
  flags.String("--md", &a.md, "write the results as a Markdown table here");
  flags.String("--combine", &a.combine,
               "A.json,B.json: no replay; put two results files side by side (--out, --md, "
               "--tsv)");
  flags.String("--tsv", &a.tsv, "with --combine: per-request data for charts");
  flags.String("--title", &a.title, "with --combine: the Markdown title");
  flags.Int("--reprefill-slack", &a.reprefill_slack,
            "with --combine: B re-prefilled a request when it evaluated more than this many "
            "reusable tokens");
  return RunWithFlags(flags, argc, argv, [&] {
    signal(SIGPIPE, SIG_IGN);
    Status st = RunBench(a);
    if (st.ok()) return 0;
    std::fprintf(stderr, "prefixd bench: %s\n", st.ToString().c_str());
    return st.code() == Status::Code::kInvalidArgument ? 2 : 1;
  });
}

}  // namespace prefixd::cli
