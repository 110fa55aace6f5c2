// prefixd_engine_bench: replays a generated agent trace in process, through two Engines side by
// side — one with the prompt cache on, one with --no-cache — alternating which goes first on
// every request so machine noise hits both alike. Prints per request what the cache reused
// against what was reusable, checks that greedy outputs are equal, then measures the capture
// overhead (cold prefill throughput, cache on vs off). See docs/bench.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bandwidth.h"
#include "bench/trace.h"
#include "engine/engine.h"
#include "engine/engine_flags.h"
#include "engine/testgen/test_model.h"
#include "util/flags.h"

namespace prefixd::bench {
namespace {

namespace fs = std::filesystem;
using engine::CompletionResult;
using engine::Engine;
using engine::Token;

const TraceOptions kTrace;

struct BenchArgs {
  std::string arch = "qwen35";
  std::string shape = "small";
  std::string model;  // an existing GGUF instead of a generated one
  std::string work_dir = "/tmp/prefixd-bench";
  std::string trace_out;
  int64_t model_seed = 1;
  engine::EngineFlagValues engine;  // --block-size, --ctx, --threads(-batch), --no-flash-attn
  // The trace: TraceOptions' defaults, sized for a few minutes on 2 CPU cores with a "small"
  // model (~40 prefill tok/s).
  int64_t sessions = kTrace.n_sessions;
  int64_t turns = kTrace.turns_per_session;
  int64_t system_tokens = kTrace.system_tokens;
  int64_t tool_tokens = kTrace.tool_tokens;
  int64_t max_tokens = kTrace.max_tokens;
  int64_t seed = int64_t(kTrace.seed);
  int64_t overhead_tokens = 512;
  int64_t overhead_reps = 3;
  int64_t decode_tokens = 128;
  int64_t decode_reps = 3;
  bool no_restart = false;
  std::string command_line;  // for the report
};

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

std::string Now() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
  return buf;
}

// Progress goes to stderr, results to stdout.
template <typename... A>
void Progress(const char* fmt, A... args) {
  std::fprintf(stderr, "[%s] ", Now().c_str());
  std::fprintf(stderr, fmt, args...);
  std::fputc('\n', stderr);
}

Result<std::string> ResolveModel(const BenchArgs& a) {
  if (!a.model.empty()) return a.model;
  const std::string path = a.work_dir + "/model-" + a.arch + "-" + a.shape + "-s" +
                           std::to_string(a.model_seed) + ".gguf";
  if (fs::exists(path)) return path;
  Progress("generating %s %s model -> %s", a.arch.c_str(), a.shape.c_str(), path.c_str());
  PREFIXD_RETURN_IF_ERROR(
      engine::MakeTestModel({a.arch, a.shape, uint64_t(a.model_seed)}, path));
  return path;
}

// `base`: the engine flags' options with the model path set.
engine::EngineOptions MakeOptions(const BenchArgs& a, const engine::EngineOptions& base,
                                  bool cache_on) {
  engine::EngineOptions o = base;
  o.cache_enabled = cache_on;
  o.cache_dir = cache_on ? a.work_dir + "/cache" : "";
  return o;
}

// The two engines the bench compares; `on` can be restarted on the same cache_dir.
struct EnginePair {
  engine::EngineOptions on_options;
  std::unique_ptr<Engine> on;
  std::unique_ptr<Engine> off;

  Status RestartOn() {
    on.reset();
    auto e = Engine::Create(on_options);
    if (!e.ok()) return e.status();
    on = std::move(e).value();
    return WarmUp(*on);
  }

  // One short request unrelated to any trace, so that first-use costs (graph allocation,
  // thread start) are not charged to the first measured request.
  static Status WarmUp(Engine& e) {
    auto prompt = e.PrepareText("Warm up the engine: one two three four five six seven.");
    if (!prompt.ok()) return prompt.status();
    engine::CompletionRequest req;
    req.prompt = *prompt;
    req.max_tokens = 1;
    return e.Complete(std::move(req)).status();
  }
};

Result<EnginePair> CreateEngines(const BenchArgs& a, const engine::EngineOptions& base) {
  EnginePair p;
  p.on_options = MakeOptions(a, base, true);
  std::error_code ec;
  fs::remove_all(p.on_options.cache_dir, ec);  // every run starts from an empty cache
  PREFIXD_ASSIGN_OR_RETURN(p.on, Engine::Create(p.on_options));
  PREFIXD_ASSIGN_OR_RETURN(p.off, Engine::Create(MakeOptions(a, base, false)));
  PREFIXD_RETURN_IF_ERROR(EnginePair::WarmUp(*p.on).WithContext("warm-up (cache on)"));
  PREFIXD_RETURN_IF_ERROR(EnginePair::WarmUp(*p.off).WithContext("warm-up (cache off)"));
  return p;
}

Result<CompletionResult> Run(Engine& e, const engine::Prompt& prompt, int max_tokens) {
  engine::CompletionRequest req;
  req.prompt = prompt;
  req.max_tokens = max_tokens;  // sampling defaults to greedy
  return e.Complete(std::move(req));
}

// Runs the same prompt on both engines, `on_first` deciding the order.
Status RunBoth(EnginePair& p, const engine::Prompt& prompt, int max_tokens, bool on_first,
               CompletionResult* on, CompletionResult* off) {
  for (int k = 0; k < 2; ++k) {
    const bool run_on = (k == 0) == on_first;
    auto r = Run(run_on ? *p.on : *p.off, prompt, max_tokens);
    if (!r.ok()) return r.status().WithContext(run_on ? "cache on" : "cache off");
    *(run_on ? on : off) = std::move(r).value();
  }
  return Status::OK();
}

size_t CommonPrefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// Reusable tokens: the longest prefix shared with any earlier prompt of the replay, capped at
// n - 1 because at least one token is always evaluated.
int32_t Reusable(const std::vector<std::vector<Token>>& earlier, const std::vector<Token>& p) {
  size_t best = 0;
  for (const auto& e : earlier) best = std::max(best, CommonPrefix(e, p));
  return int32_t(std::min(best, p.empty() ? 0 : p.size() - 1));
}

struct Totals {
  int64_t requests = 0, prompt = 0, reusable = 0, cached = 0, eval_on = 0, eval_off = 0;
  int64_t mismatches = 0, hits = 0;
  double prefill_on = 0, prefill_off = 0;
  std::map<std::string, int> misses;
  // Restores that set bytes, by Tier: state bytes and ms (disk: the prefetch's reads included).
  uint64_t ram_bytes = 0, disk_bytes = 0, max_restore_bytes = 0;
  double ram_ms = 0, disk_ms = 0;
  void Add(int32_t reusable_tokens, const CompletionResult& on, const CompletionResult& off) {
    ++requests;
    prompt += on.usage.prompt_tokens;
    reusable += reusable_tokens;
    cached += on.usage.cached_tokens;
    eval_on += on.usage.evaluated_tokens;
    eval_off += off.usage.evaluated_tokens;
    prefill_on += on.usage.prefill_ms;
    prefill_off += off.usage.prefill_ms;
    if (on.tokens != off.tokens) ++mismatches;
    if (on.usage.cached_tokens > 0) ++hits;
    if (on.cache.miss != engine::CacheMiss::kNotMissed) {
      ++misses[cache::MissReasonName(on.cache.miss)];
    }
    const engine::Usage& u = on.usage;
    if (u.restored_bytes > 0 && on.cache.tier == engine::CacheTier::kRam) {
      ram_bytes += u.restored_bytes, ram_ms += u.restore_ms;
    }
    if (u.restored_bytes > 0 && on.cache.tier == engine::CacheTier::kDisk) {
      disk_bytes += u.restored_bytes, disk_ms += u.restore_ms + u.prefetch_ms;
    }
    max_restore_bytes = std::max(max_restore_bytes, u.restored_bytes);
  }
};

void PrintHeader() {
  std::printf("%4s %4s %-14s %7s %8s %7s %7s %7s %8s %9s %9s %6s %6s %-5s %-16s %s\n", "#",
              "sess", "flags", "prompt", "reusable", "cached", "eng_reu", "eval_on", "eval_off",
              "pf_on_ms", "pf_off_ms", "ch_on", "ch_off", "tier", "miss", "out");
}

void PrintRow(size_t i, const TraceRequest& t, int32_t reusable, const CompletionResult& on,
              const CompletionResult& off) {
  const std::string flags = TraceFlagsToString(t.flags);
  std::printf("%4zu %4d %-14s %7d %8d %7d %7d %7d %8d %9.1f %9.1f %6d %6d %-5s %-16s %s\n", i,
              t.session, flags.empty() ? "-" : flags.c_str(), on.usage.prompt_tokens, reusable,
              on.usage.cached_tokens, on.cache.reusable_tokens, on.usage.evaluated_tokens,
              off.usage.evaluated_tokens, on.usage.prefill_ms, off.usage.prefill_ms,
              on.usage.prefill_chunks, off.usage.prefill_chunks,
              cache::TierName(on.cache.tier),
              on.cache.miss == engine::CacheMiss::kNotMissed ? "-"
                                                             : cache::MissReasonName(on.cache.miss),
              on.tokens == off.tokens ? "same" : "DIFF");
  std::fflush(stdout);
}

// The whole replay, and the same split at the restart (reuse after it needs the disk tier).
struct ReplayTotals {
  Totals all, before_restart, from_restart;
  bool restarted = false;
};

void PrintTotals(const ReplayTotals& r) {
  const Totals& t = r.all;
  std::printf("\nTOTALS (%lld requests)\n", (long long)t.requests);
  std::printf("  prompt tokens            %lld\n", (long long)t.prompt);
  std::printf("  reusable tokens          %lld\n", (long long)t.reusable);
  std::printf("  cached tokens (on)       %lld   requests with a hit: %lld\n",
              (long long)t.cached, (long long)t.hits);
  std::printf("  reused / reusable        %.1f%%\n", 100 * Ratio(t.cached, t.reusable));
  std::printf("  evaluated on / off       %lld / %lld  (%.1f%%)\n", (long long)t.eval_on,
              (long long)t.eval_off, 100 * Ratio(t.eval_on, t.eval_off));
  std::printf("  prefill ms on / off      %.0f / %.0f  (ratio %.3f)\n", t.prefill_on,
              t.prefill_off, Ratio(t.prefill_on, t.prefill_off));
  std::printf("  output mismatches        %lld of %lld (greedy tokens, cache on vs off)\n",
              (long long)t.mismatches, (long long)t.requests);
  std::string misses;
  for (const auto& [reason, n] : t.misses) misses += " " + reason + "=" + std::to_string(n);
  std::printf("  miss reasons (on)       %s\n", misses.empty() ? " none" : misses.c_str());
  if (!r.restarted) return;
  const Totals& b = r.before_restart;
  const Totals& f = r.from_restart;
  std::printf("  reused / reusable before the restart  %lld / %lld  (%.1f%%)\n",
              (long long)b.cached, (long long)b.reusable, 100 * Ratio(b.cached, b.reusable));
  std::printf("  reused / reusable from the restart on %lld / %lld  (%.1f%%)\n",
              (long long)f.cached, (long long)f.reusable, 100 * Ratio(f.cached, f.reusable));
}

// Restore throughput by Tier against memcpy of the largest restore and a plain read() of the
// cache's record files, both measured now.
void PrintRestoreRates(const Totals& t, const std::string& cache_dir) {
  const double memcpy_bw = MemcpyGBps(t.max_restore_bytes);
  uint64_t file_bytes = 0;
  const double read_bw = cache_dir.empty() ? 0 : PlainReadGBps(cache_dir + "/records", &file_bytes);
  auto rate = [](uint64_t bytes, double ms) { return ms > 0 ? bytes / (ms * 1e6) : 0.0; };
  const double ram_bw = rate(t.ram_bytes, t.ram_ms), disk_bw = rate(t.disk_bytes, t.disk_ms);
  std::printf("  restore from RAM         %.1f MB in %.1f ms = %.2f GB/s; memcpy %.2f GB/s (%.0f%%)\n",
              t.ram_bytes / 1e6, t.ram_ms, ram_bw, memcpy_bw, 100 * Ratio(ram_bw, memcpy_bw));
  std::printf("  restore from disk        %.1f MB in %.1f ms = %.2f GB/s; plain read %.2f GB/s "
              "(%.0f%%)\n", t.disk_bytes / 1e6, t.disk_ms, disk_bw, read_bw,
              100 * Ratio(disk_bw, read_bw));
}

Result<ReplayTotals> ReplayTrace(EnginePair& p, const std::vector<TraceRequest>& trace) {
  ReplayTotals totals;
  std::vector<std::vector<Token>> earlier;
  PrintHeader();
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& t = trace[i];
    if (t.flags & kTraceRestart) {
      totals.restarted = true;
      Progress("restart: recreating the cache-on Engine on the same cache_dir");
      PREFIXD_RETURN_IF_ERROR(p.RestartOn().WithContext("restart"));
    }
    PREFIXD_ASSIGN_OR_RETURN(engine::Prompt prompt, p.on->PrepareChat(t.messages_json,
                                                                      t.tools_json));
    const int32_t reusable = Reusable(earlier, prompt.tokens);
    Progress("request %zu/%zu: session %d, %zu prompt tokens", i + 1, trace.size(), t.session,
             prompt.tokens.size());
    CompletionResult on, off;
    PREFIXD_RETURN_IF_ERROR(
        RunBoth(p, prompt, t.max_tokens, i % 2 == 0, &on, &off).WithContext("request " +
                                                                           std::to_string(i)));
    PrintRow(i, t, reusable, on, off);
    totals.all.Add(reusable, on, off);
    (totals.restarted ? totals.from_restart : totals.before_restart).Add(reusable, on, off);
    earlier.push_back(std::move(prompt.tokens));
  }
  return totals;
}

// Cold prefill with the cache on (a prompt never seen: capture, snapshot and publish happen,
// nothing is restored) against --no-cache, on the same prompt, alternating the order.
Status MeasureCaptureOverhead(EnginePair& p, const BenchArgs& a) {
  std::printf("\nCAPTURE OVERHEAD (cold prefill of a fresh ~%lld-token prompt, %lld reps)\n",
              (long long)a.overhead_tokens, (long long)a.overhead_reps);
  std::printf("%4s %7s %7s %9s %9s %10s %10s %7s\n", "rep", "prompt", "cached", "pf_on_ms",
              "pf_off_ms", "tok/s_on", "tok/s_off", "on/off");
  double tok_on = 0, tok_off = 0, ms_on = 0, ms_off = 0;
  for (int64_t r = 0; r < a.overhead_reps; ++r) {
    const uint64_t seed = uint64_t(a.seed) * 1000003u + 7919u * uint64_t(r + 1);
    // Raw text in the chat format that opens with words of its own, so that not even the
    // "<|im_start|>system" of the trace's prompts is shared: the cache restores nothing.
    const std::string text = WordSalad(seed, int(a.overhead_tokens * 4 / 5)) +
                             "<|im_end|>\n<|im_start|>user\n" +
                             WordSalad(seed + 1, int(a.overhead_tokens / 5)) +
                             "<|im_end|>\n<|im_start|>assistant\n";
    PREFIXD_ASSIGN_OR_RETURN(engine::Prompt prompt, p.on->PrepareText(text));
    Progress("capture overhead rep %lld/%lld: %zu tokens", (long long)r + 1,
             (long long)a.overhead_reps, prompt.tokens.size());
    CompletionResult on, off;
    PREFIXD_RETURN_IF_ERROR(RunBoth(p, prompt, 1, r % 2 == 1, &on, &off));
    const double tps_on = Ratio(on.usage.evaluated_tokens * 1000.0, on.usage.prefill_ms);
    const double tps_off = Ratio(off.usage.evaluated_tokens * 1000.0, off.usage.prefill_ms);
    std::printf("%4lld %7d %7d %9.1f %9.1f %10.1f %10.1f %6.1f%%\n", (long long)r,
                on.usage.prompt_tokens, on.usage.cached_tokens, on.usage.prefill_ms,
                off.usage.prefill_ms, tps_on, tps_off, 100 * Ratio(tps_on, tps_off));
    std::fflush(stdout);
    tok_on += on.usage.evaluated_tokens;
    tok_off += off.usage.evaluated_tokens;
    ms_on += on.usage.prefill_ms;
    ms_off += off.usage.prefill_ms;
  }
  const double tps_on = Ratio(tok_on * 1000, ms_on), tps_off = Ratio(tok_off * 1000, ms_off);
  std::printf("  cold prefill tok/s on / off   %.1f / %.1f  (on/off %.1f%%, target >= 95%%)\n",
              tps_on, tps_off, 100 * Ratio(tps_on, tps_off));
  return Status::OK();
}

// Decode tokens/s of one engine: `streams` requests generating `tokens` each (ignore_eos) at
// once; all streams' tokens over the wall time of the whole batch, prefill excluded.
Result<double> DecodeRate(Engine& e, int streams, int tokens) {
  PREFIXD_ASSIGN_OR_RETURN(engine::Prompt prompt,
                           e.PrepareText("<|im_start|>user\nWrite a long story.<|im_end|>\n"
                                         "<|im_start|>assistant\n"));
  std::vector<Result<CompletionResult>> got(size_t(streams), Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      engine::CompletionRequest req;
      req.prompt = prompt;
      req.max_tokens = tokens;
      req.sampling.ignore_eos = true;
      got[size_t(s)] = e.Complete(std::move(req));
    });
  }
  for (auto& t : threads) t.join();
  double generated = 0, decode_ms = 0;
  for (auto& r : got) {
    if (!r.ok()) return r.status();
    generated += r->usage.completion_tokens;
    decode_ms = std::max(decode_ms, r->usage.decode_ms);
  }
  return Ratio(generated * 1000, decode_ms);
}

// Decode with the cache on runs as fast as with it off. One engine at a time (two
// engines in one process are two scheduler threads, each with its own OpenMP thread team,
// which is exactly the slowdown this guards against), best of `reps` per cell.
Status MeasureDecode(const BenchArgs& a, const engine::EngineOptions& base) {
  std::printf("\nDECODE (%lld tokens per stream, ignore_eos, best of %lld; one engine loaded at a "
              "time)\n%-10s %12s %12s\n", (long long)a.decode_tokens, (long long)a.decode_reps,
              "engine", "1 stream", "2 streams");
  std::map<bool, std::vector<double>> rates;
  for (bool cache_on : {true, false}) {
    engine::EngineOptions o = MakeOptions(a, base, cache_on);
    o.n_slots = 2;
    o.cache_dir = "";
    PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(o));
    PREFIXD_RETURN_IF_ERROR(EnginePair::WarmUp(*e));
    for (int streams : {1, 2}) {
      double best = 0;
      for (int64_t r = 0; r < a.decode_reps; ++r) {
        PREFIXD_ASSIGN_OR_RETURN(double rate, DecodeRate(*e, streams, int(a.decode_tokens)));
        best = std::max(best, rate);
      }
      rates[cache_on].push_back(best);
    }
    std::printf("%-10s %12.1f %12.1f\n", cache_on ? "cache on" : "cache off",
                rates[cache_on][0], rates[cache_on][1]);
  }
  std::printf("  on / off: 1 stream %.3f, 2 streams %.3f (target >= 0.97)\n",
              Ratio(rates[true][0], rates[false][0]), Ratio(rates[true][1], rates[false][1]));
  return Status::OK();
}

TraceOptions MakeTraceOptions(const BenchArgs& a) {
  TraceOptions t;
  t.seed = uint64_t(a.seed);
  t.n_sessions = int(a.sessions);
  t.turns_per_session = int(a.turns);
  t.system_tokens = int(a.system_tokens);
  t.tool_tokens = int(a.tool_tokens);
  t.max_tokens = int(a.max_tokens);
  t.restart = !a.no_restart;
  return t;
}

void PrintConfig(const BenchArgs& a, const std::string& model, size_t n_requests) {
  std::printf("command: %s\n", a.command_line.c_str());
  std::printf("prefixd_engine_bench: model %s (arch %s, shape %s)\n", model.c_str(),
              a.model.empty() ? a.arch.c_str() : "?", a.model.empty() ? a.shape.c_str() : "?");
  std::printf("trace: seed %lld, %lld sessions x %lld turns, system ~%lld tokens, tool results "
              "~%lld tokens, max_tokens %lld -> %zu requests\n",
              (long long)a.seed, (long long)a.sessions, (long long)a.turns,
              (long long)a.system_tokens, (long long)a.tool_tokens, (long long)a.max_tokens,
              n_requests);
  std::printf("engine: block size %lld, ctx %lld, threads %lld (0 = all), %u hardware threads; "
              "cache on and --no-cache run alternately in one process\n\n",
              (long long)a.engine.block_size, (long long)a.engine.ctx, (long long)a.engine.threads,
              std::thread::hardware_concurrency());
}

int Fail(const Status& st, int rc) {
  std::fprintf(stderr, "prefixd_engine_bench: %s\n", st.ToString().c_str());
  return rc;
}

int Main(const BenchArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  auto base = engine::ToEngineOptions(a.engine);
  if (!base.ok()) return Fail(base.status(), 2);
  std::error_code ec;
  fs::create_directories(a.work_dir, ec);
  auto trace = GenerateTrace(MakeTraceOptions(a));
  if (!trace.ok()) return Fail(trace.status(), 2);
  if (!a.trace_out.empty()) {
    const Status st = WriteTraceJsonl(a.trace_out, *trace);
    if (!st.ok()) return Fail(st, 1);
    Progress("wrote the trace to %s", a.trace_out.c_str());
  }
  auto model = ResolveModel(a);
  if (!model.ok()) return Fail(model.status(), 1);
  base->model_path = *model;
  PrintConfig(a, *model, trace->size());
  Progress("loading two engines (cache on, cache off)");
  auto engines = CreateEngines(a, *base);
  if (!engines.ok()) return Fail(engines.status(), 1);
  auto totals = ReplayTrace(*engines, *trace);
  if (!totals.ok()) return Fail(totals.status(), 1);
  PrintTotals(*totals);
  PrintRestoreRates(totals->all, engines->on_options.cache_dir);
  if (a.overhead_reps > 0) {
    const Status st = MeasureCaptureOverhead(*engines, a);
    if (!st.ok()) return Fail(st, 1);
  }
  engines->on.reset();  // one engine at a time from here on
  engines->off.reset();
  if (a.decode_reps > 0) {
    const Status st = MeasureDecode(a, *base);
    if (!st.ok()) return Fail(st, 1);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\nwall time %.0f s\n", secs);
  Progress("done");
  return totals->all.mismatches == 0 ? 0 : 3;
}

}  // namespace
}  // namespace prefixd::bench

int main(int argc, char** argv) {
  using prefixd::bench::BenchArgs;
  using prefixd::engine::EngineFlagSet;
  BenchArgs a;
  for (int i = 0; i < argc; ++i) a.command_line += (i ? " " : "") + std::string(argv[i]);
  prefixd::Flags flags(
      "prefixd_engine_bench",
      "Replay a generated agent trace in process with the prompt cache on and off side by "
      "side; report reuse, output equality and capture overhead.");
  flags.String("--arch", &a.arch, "test-model architecture to generate (ignored with --model)");
  flags.String("--shape", &a.shape, "test-model shape: tiny, small or medium");
  flags.String("--model", &a.model, "use this GGUF instead of generating a test model");
  flags.Int("--model-seed", &a.model_seed, "weights seed of the generated test model");
  flags.String("--work-dir", &a.work_dir,
               "folder for generated models and the cache (its cache/ is wiped at start)");
  prefixd::engine::DeclareEngineFlags(flags, a.engine, EngineFlagSet::kBlockSize);
  flags.Int("--sessions", &a.sessions, "agent sessions in the trace");
  flags.Int("--turns", &a.turns, "requests per session");
  flags.Int("--system-tokens", &a.system_tokens, "system prompt + tool schemas, approx tokens");
  flags.Int("--tool-tokens", &a.tool_tokens, "one tool result, approx tokens");
  flags.Int("--max-tokens", &a.max_tokens, "tokens generated per request (greedy)");
  flags.Int("--decode-tokens", &a.decode_tokens, "tokens per stream in the decode measurement");
  flags.Int("--decode-reps", &a.decode_reps, "decode measurement repetitions (0: skip it)");
  flags.Int("--seed", &a.seed, "trace seed");
  flags.Bool("--no-restart", &a.no_restart, "leave out the restart in the middle of the trace");
  prefixd::engine::DeclareEngineFlags(flags, a.engine, EngineFlagSet::kFlashAttn);
  flags.String("--trace-out", &a.trace_out, "also write the trace as JSONL to this file");
  prefixd::engine::DeclareEngineFlags(flags, a.engine,
                                      EngineFlagSet::kContext | EngineFlagSet::kThreads);
  flags.Int("--overhead-tokens", &a.overhead_tokens, "capture overhead: fresh prompt size");
  flags.Int("--overhead-reps", &a.overhead_reps, "capture overhead: repetitions (0: skip)");
  // This binary has no subcommand: its flags start at argv[1].
  return prefixd::RunWithFlags(flags, argc, argv, [&] { return prefixd::bench::Main(a); }, 1);
}
