// prefixd_disk_bench: the disk tier after a restart, side by side in one run.
//
//  1. Restore throughput: a long prompt is served and written to the disk tier; after a
//     restart (a new Engine on the same cache dir, RAM empty) the same prompt restores its
//     prefix from disk. Bytes of the record files restored / restore time, against a plain
//     sequential read() of the same files in the same run (page cache warm for both).
//  2. Restart-to-first-warm-token vs cold prefill: wall time from creating the Engine to the
//     first generated token, on the restored cache vs with --no-cache (timed once per run).
//  3. Restore throughput from RAM: in the restarted Engine another prompt takes the
//     only slot, then the first prompt comes back and restores from the RAM Tier.
// With --remote-cache URL the prompt is written to the shared tier too, and every
// restart is "another server": a new Engine on an empty cache dir and the same Redis, so its
// prefix comes from the shared tier (columns "remote" instead of "disk").
// Both restores are set against baselines measured in the same rep on the same bytes: memcpy
// (RAM) and a plain sequential read() of the record files (disk). Repeated --reps times,
// alternating, so machine noise hits both sides; the summary gives medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <vector>

#include "bench/bandwidth.h"
#include "bench/trace.h"
#include "engine/engine.h"
#include "engine/engine_flags.h"
#include "engine/testgen/test_model.h"
#include "util/buffer_pool.h"
#include "util/flags.h"

namespace fs = std::filesystem;
using namespace prefixd;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string arch = "qwen35";
  std::string shape = "small";
  std::string model;
  std::string work_dir = "/tmp/prefixd-disk-bench";
  int64_t tokens = 2048;
  int64_t reps = 3;
  bool keep_cache = false;
  bool no_cold = false;
  // --threads, --block-size, and the shared tier (each restart is another server on it).
  engine::EngineFlagValues engine;
};

double Ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

uint64_t RecordBytes(const fs::path& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "records")) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

// Average record file size by kind (rows = one Block's KV rows, snap = one Snapshot).
void PrintRecordSizes(const fs::path& dir, int64_t block_size) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_ext;  // ext -> (files, bytes)
  for (const auto& e : fs::recursive_directory_iterator(dir / "records")) {
    if (!e.is_regular_file()) continue;
    auto& [n, bytes] = by_ext[e.path().extension().string()];
    ++n, bytes += e.file_size();
  }
  for (const auto& [ext, nb] : by_ext) {
    const double avg = double(nb.second) / double(nb.first);
    std::printf("  %-6s %4llu files, %10.0f bytes each", ext.c_str(), (unsigned long long)nb.first, avg);
    if (ext == ".rows") std::printf(" = %.0f bytes per token", avg / double(block_size));
    std::printf("\n");
  }
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// `base`: the engine flags' options with the model path set.
engine::EngineOptions Options(const Args& a, const engine::EngineOptions& base, bool cache) {
  engine::EngineOptions o = base;
  o.n_ctx_per_slot = uint32_t(a.tokens + 512);
  o.cache_enabled = cache;
  o.cache_dir = cache ? a.work_dir + "/cache" : "";
  if (!cache) o.remote_cache_url.clear();
  return o;
}

// The restart of each rep: the same cache dir, or with a shared tier another server (an empty
// cache dir of its own, the same Redis).
engine::EngineOptions RestartOptions(const Args& a, const engine::EngineOptions& base) {
  engine::EngineOptions o = Options(a, base, true);
  if (o.remote_cache_url.empty()) return o;
  o.cache_dir = a.work_dir + "/cache-other-server";
  fs::remove_all(o.cache_dir);
  return o;
}

struct FirstToken {
  double create_ms = 0, ttft_ms = 0, prefill_ms = 0;
  engine::CompletionResult r;
  std::unique_ptr<engine::Engine> engine;  // kept for a next request
};

Result<engine::CompletionResult> CompleteOne(engine::Engine& engine, const std::string& messages) {
  PREFIXD_ASSIGN_OR_RETURN(engine::Prompt prompt, engine.PrepareChat(messages, "", true));
  engine::CompletionRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = 1;
  return engine.Complete(req);
}

// Creates an Engine and times its first token for `messages`.
Result<FirstToken> TimeFirstToken(const engine::EngineOptions& o, const std::string& messages) {
  FirstToken out;
  auto t0 = Clock::now();
  PREFIXD_ASSIGN_OR_RETURN(out.engine, engine::Engine::Create(o));
  out.create_ms = Ms(t0);
  PREFIXD_ASSIGN_OR_RETURN(out.r, CompleteOne(*out.engine, messages));
  out.ttft_ms = Ms(t0);
  out.prefill_ms = out.r.usage.prefill_ms;
  out.engine->FlushCache();
  return out;
}

// A restore from the RAM Tier in `engine` (which served `messages` already): `other` takes the
// only slot, then `messages` comes back.
Result<engine::Usage> RamRestore(engine::Engine& engine, const std::string& messages,
                                 const std::string& other) {
  PREFIXD_RETURN_IF_ERROR(CompleteOne(engine, other).status());
  PREFIXD_ASSIGN_OR_RETURN(engine::CompletionResult r, CompleteOne(engine, messages));
  if (r.cache.tier != engine::CacheTier::kRam) {
    return Status::Internal(std::string("expected a RAM restore, got ") +
                            cache::TierName(r.cache.tier));
  }
  return r.usage;
}

double GBps(uint64_t bytes, double ms) { return bytes / (ms * 1e6); }

int Run(const Args& a) {
  auto base = engine::ToEngineOptions(a.engine);
  if (!base.ok()) return std::fprintf(stderr, "%s\n", base.status().ToString().c_str()), 2;
  const std::string& remote_cache = base->remote_cache_url;
  fs::create_directories(a.work_dir);
  std::string model = a.model;
  if (model.empty()) {
    model = a.work_dir + "/model-" + a.arch + "-" + a.shape + ".gguf";
    if (!fs::exists(model)) {
      std::fprintf(stderr, "generating %s %s model\n", a.arch.c_str(), a.shape.c_str());
      Status st = engine::MakeTestModel({a.arch, a.shape, 1}, model);
      if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
    }
  }
  base->model_path = model;
  std::string messages = "[{\"role\":\"system\",\"content\":\"" +
                         bench::WordSalad(7, int(a.tokens) - 40) +
                         "\"},{\"role\":\"user\",\"content\":\"Summarize the above.\"}]";
  std::printf("model %s (%s %s), prompt ~%lld tokens, block %lld, %lld reps\n\n", model.c_str(),
              a.arch.c_str(), a.shape.c_str(), (long long)a.tokens,
              (long long)a.engine.block_size, (long long)a.reps);
  const std::string other = "[{\"role\":\"user\",\"content\":\"Something else entirely.\"}]";
  std::printf("GB/s over the state bytes restored; memcpy and read() of the same bytes in the "
              "same rep. Disk: prefetch = on the request's thread (opening the records and bringing "
              "them into the page cache; through RAM: reading them into RAM), restore = on the "
              "worker (what other slots wait for)\n");
  std::printf("rep  prompt cached  state_MB record_MB | %s: prefetch_ms+restore_ms  GB/s  "
              "read_GB/s  ratio | ram: restore_ms  GB/s  memcpy_GB/s  ratio | ttft_restart_ms  "
              "ttft_cold_ms  ratio  create_ms\n",
              remote_cache.empty() ? "disk" : "remote");
  std::vector<double> disk_ratio, via_ratio, ram_ratio, ttft_ratio, fresh_gbps;
  // The disk Tier is written once (a cold prefill with the cache on); every rep restarts on it.
  // With --keep-cache a cache dir written by an earlier run of the same settings is reused.
  const bool have_cache = a.keep_cache && remote_cache.empty() &&
                          fs::exists(a.work_dir + "/cache/records") &&
                          RecordBytes(a.work_dir + "/cache") > 0;
  double fill_ttft_ms = 0, fill_request_ms = 0;
  if (!have_cache) {
    fs::remove_all(a.work_dir + "/cache");
    auto fill = TimeFirstToken(Options(a, *base, true), messages);  // writes the disk tier
    if (!fill.ok()) return std::fprintf(stderr, "%s\n", fill.status().ToString().c_str()), 1;
    fill_ttft_ms = fill->ttft_ms;
    fill_request_ms = fill->ttft_ms - fill->create_ms;
  }
  // The cold first token (--no-cache), once per run: on a small machine an 8K-token prefill
  // takes minutes.
  std::optional<FirstToken> cold;
  if (!a.no_cold) {
    auto c = TimeFirstToken(Options(a, *base, false), messages);
    if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().ToString().c_str()), 1;
    c->engine.reset();
    cold = std::move(*c);
  }
  const double cold_ms = cold ? cold->ttft_ms : fill_ttft_ms;
  // The first token once the Engine is up (its request alone, no model load): what a server
  // that is already running sees.
  const double cold_request_ms = cold ? cold->ttft_ms - cold->create_ms : fill_request_ms;
  std::vector<double> request_ratio;
  if (cold_ms == 0) std::printf("(no cold run: --no-cold and --keep-cache; ttft ratios are 0)\n");
  for (int64_t rep = 0; rep < a.reps; ++rep) {
    auto warm = TimeFirstToken(RestartOptions(a, *base), messages);  // the restart
    if (!warm.ok()) return std::fprintf(stderr, "%s\n", warm.status().ToString().c_str()), 1;
    uint64_t bytes = 0;
    const double read_bw = bench::PlainReadGBps(a.work_dir + "/cache/records", &bytes);
    const engine::EngineStats es = warm->engine->GetStats();
    warm->engine.reset();
    // The same restart with the disk hit read into the RAM tier first (the path before
    // restores read disk records straight into the sequence), side by side; that Engine's RAM tier then holds the prefix for the RAM restore.
    engine::EngineOptions through_ram = RestartOptions(a, *base);
    through_ram.disk_hits_through_ram = true;
    auto via = TimeFirstToken(through_ram, messages);
    if (!via.ok()) return std::fprintf(stderr, "%s\n", via.status().ToString().c_str()), 1;
    auto ram = RamRestore(*via->engine, messages, other);
    if (!ram.ok()) return std::fprintf(stderr, "%s\n", ram.status().ToString().c_str()), 1;
    via->engine.reset();
    // The same restart into a process that has freed no payload yet (a server's first restore
    // after it starts): no kept buffer, every payload in fresh memory. The restarts above find
    // the buffers the Engines before them freed, as a running server finds what its RAM tier
    // evicted (util/buffer_pool.h).
    BufferPool::Shared().Clear();
    auto fresh = TimeFirstToken(RestartOptions(a, *base), messages);
    if (!fresh.ok()) return std::fprintf(stderr, "%s\n", fresh.status().ToString().c_str()), 1;
    fresh->engine.reset();
    const auto& fu = fresh->r.usage;
    const double fresh_bw = GBps(fu.restored_bytes, std::max(0.001, fu.prefetch_ms + fu.restore_ms));
    fresh_gbps.push_back(fresh_bw);
    const double memcpy_bw = bench::MemcpyGBps(ram->restored_bytes);
    const auto& u = warm->r.usage;
    // Each restore's rate over the state bytes it set: disk against reading the record files,
    // RAM against memcpy of the state's bytes.
    // From disk: the reads into RAM on the request's thread (prefetch), then the restore.
    const double disk_ms = u.prefetch_ms + u.restore_ms;
    const double disk_bw = GBps(u.restored_bytes, std::max(0.001, disk_ms));
    const double ram_bw = GBps(ram->restored_bytes, std::max(0.001, ram->restore_ms));
    disk_ratio.push_back(disk_bw / read_bw);
    const auto& vu = via->r.usage;
    const double via_bw = GBps(vu.restored_bytes, std::max(0.001, vu.prefetch_ms + vu.restore_ms));
    via_ratio.push_back(via_bw / read_bw);
    ram_ratio.push_back(ram_bw / memcpy_bw);
    ttft_ratio.push_back(cold_ms > 0 ? warm->ttft_ms / cold_ms : 0);
    std::printf("%3lld  %6d %6d  %8.1f %9.1f | %12.1f+%-12.1f %5.2f %10.2f %5.0f%% | %14.1f "
                "%5.2f %12.2f %5.0f%% | %15.1f %13.1f %6.3f %10.1f\n",
                (long long)rep, u.prompt_tokens, u.cached_tokens, u.restored_bytes / 1048576.0,
                bytes / 1048576.0, u.prefetch_ms, u.restore_ms, disk_bw, read_bw,
                100 * disk_ratio.back(), ram->restore_ms, ram_bw, memcpy_bw,
                100 * ram_ratio.back(), warm->ttft_ms, cold_ms, ttft_ratio.back(),
                warm->create_ms);
    const auto want = remote_cache.empty() ? engine::CacheTier::kDisk : engine::CacheTier::kRemote;
    if (warm->r.cache.tier != want) {
      std::printf("     the restart restored from %s, not %s!\n",
                  cache::TierName(warm->r.cache.tier), cache::TierName(want));
    }
    if (cold && warm->r.tokens != cold->r.tokens) std::printf("     output differs from cold!\n");
    std::printf("     %s through RAM (the old path): %.1f+%.1f ms, %.2f GB/s, %.0f%% of read()\n",
                remote_cache.empty() ? "disk" : "remote", vu.prefetch_ms, vu.restore_ms, via_bw,
                100 * via_ratio.back());
    std::printf("     %s into fresh memory (no kept buffers): %.1f+%.1f ms, %.2f GB/s\n",
                remote_cache.empty() ? "disk" : "remote", fu.prefetch_ms, fu.restore_ms, fresh_bw);
    const double request_ms = warm->ttft_ms - warm->create_ms;
    request_ratio.push_back(cold_request_ms > 0 ? request_ms / cold_request_ms : 0);
    std::printf("     first token without Engine::Create: %.1f ms, cold %.1f ms (%.3f)", request_ms,
                cold_request_ms, request_ratio.back());
    if (es.remote) {
      std::printf("; %.1f MB of records read from the shared tier", es.remote->bytes_read / 1048576.0);
    }
    std::printf("\n");
    if (rep == 0) PrintRecordSizes(a.work_dir + "/cache", a.engine.block_size);
  }
  std::printf("\nmedians over %lld reps:\n", (long long)a.reps);
  std::printf("restore from %s / plain sequential read: %.0f%% (target >= 50%%)\n",
              remote_cache.empty() ? "disk" : "the shared tier", 100 * Median(disk_ratio));
  std::printf("restore from %s read into RAM first (the old path) / plain read: %.0f%%\n",
              remote_cache.empty() ? "disk" : "the shared tier", 100 * Median(via_ratio));
  std::printf("restore from %s into fresh memory (no kept buffers): %.2f GB/s\n",
              remote_cache.empty() ? "disk" : "the shared tier", Median(fresh_gbps));
  std::printf("restore from RAM / memcpy: %.0f%% (target >= 50%%)\n", 100 * Median(ram_ratio));
  std::printf("restart-to-first-token / cold (--no-cache) first token: %.3f (target <= 0.05)\n",
              Median(ttft_ratio));
  std::printf("first token without Engine::Create / cold's: %.3f\n", Median(request_ratio));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  Flags flags("disk-bench",
              "Disk tier after a restart: restore throughput and first token. With "
              "--remote-cache each restart is another server (an empty cache dir of its own) "
              "restoring from the shared tier.");
  flags.String("--arch", &a.arch, "test-model architecture");
  flags.String("--shape", &a.shape, "test-model shape (tiny, small, medium)");
  flags.String("--model", &a.model, "use this GGUF instead of generating one");
  flags.String("--work-dir", &a.work_dir, "scratch dir (its cache/ is wiped per rep)");
  flags.Int("--tokens", &a.tokens, "prompt length, about");
  flags.Int("--reps", &a.reps, "repetitions");
  engine::DeclareEngineFlags(flags, a.engine,
                             engine::EngineFlagSet::kBlockSize | engine::EngineFlagSet::kThreads |
                                 engine::EngineFlagSet::kGpuLayers |
                                 engine::EngineFlagSet::kFlashAttn);
  flags.Bool("--keep-cache", &a.keep_cache, "reuse the cache dir an earlier run wrote");
  flags.Bool("--no-cold", &a.no_cold, "skip the --no-cache first token (use the fill's)");
  engine::DeclareEngineFlags(flags, a.engine, engine::EngineFlagSet::kRemoteCache);
  return RunWithFlags(flags, argc, argv, [&] { return Run(a); }, 1);
}
