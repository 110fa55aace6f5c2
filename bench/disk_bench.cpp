// prefixd_disk_bench: the disk tier after a restart, side by side in one run (issue 5).
//
//  1. Restore throughput: a long prompt is served and written to the disk tier; after a
//     restart (a new Engine on the same cache dir, RAM empty) the same prompt restores its
//     prefix from disk. Bytes of the record files restored / restore time, against a plain
//     sequential read() of the same files in the same run (page cache warm for both).
//  2. Restart-to-first-warm-token vs cold prefill: wall time from creating the Engine to the
//     first generated token, on the restored cache vs with --no-cache.
// Repeated --reps times, alternating, so machine noise hits both sides.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "bench/trace.h"
#include "cli/flags.h"
#include "engine/engine.h"
#include "engine/test_model.h"

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
  int64_t threads = 0;
  int64_t block_size = 256;
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

// Reads every record file once, sequentially, into one buffer. Returns ms.
double PlainRead(const fs::path& dir) {
  std::vector<char> buf(1 << 20);
  auto t0 = Clock::now();
  for (const auto& e : fs::recursive_directory_iterator(dir / "records")) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0) {
    }
  }
  return Ms(t0);
}

engine::EngineOptions Options(const Args& a, const std::string& model, bool cache) {
  engine::EngineOptions o;
  o.model_path = model;
  o.n_ctx_per_slot = uint32_t(a.tokens + 512);
  o.n_threads = int(a.threads);
  o.block_size = uint32_t(a.block_size);
  o.cache_enabled = cache;
  if (cache) o.cache_dir = a.work_dir + "/cache";
  return o;
}

struct FirstToken {
  double create_ms = 0, ttft_ms = 0, prefill_ms = 0;
  engine::CompletionResult r;
};

// Creates an Engine and times its first token for `messages`.
Result<FirstToken> TimeFirstToken(const engine::EngineOptions& o, const std::string& messages) {
  FirstToken out;
  auto t0 = Clock::now();
  PREFIXD_ASSIGN_OR_RETURN(auto engine, engine::Engine::Create(o));
  out.create_ms = Ms(t0);
  PREFIXD_ASSIGN_OR_RETURN(engine::Prompt prompt, engine->PrepareChat(messages, "", true));
  engine::CompletionRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = 1;
  PREFIXD_ASSIGN_OR_RETURN(out.r, engine->Complete(req));
  out.ttft_ms = Ms(t0);
  out.prefill_ms = out.r.usage.prefill_ms;
  engine->FlushCache();
  return out;
}

int Run(const Args& a) {
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
  std::string messages = "[{\"role\":\"system\",\"content\":\"" +
                         bench::WordSalad(7, int(a.tokens) - 40) +
                         "\"},{\"role\":\"user\",\"content\":\"Summarize the above.\"}]";
  std::printf("model %s (%s %s), prompt ~%lld tokens, block %lld, %lld reps\n\n", model.c_str(),
              a.arch.c_str(), a.shape.c_str(), (long long)a.tokens, (long long)a.block_size,
              (long long)a.reps);
  std::printf("rep  prompt cached  record_MB  restored_MB  restore_ms  plain_read_ms  restore/read  "
              "ttft_restart_ms  ttft_cold_ms  ttft_ratio\n");
  double sum_restore_bw = 0, sum_read_bw = 0, sum_warm = 0, sum_cold = 0;
  for (int64_t rep = 0; rep < a.reps; ++rep) {
    fs::remove_all(a.work_dir + "/cache");
    auto fill = TimeFirstToken(Options(a, model, true), messages);  // writes the disk tier
    if (!fill.ok()) return std::fprintf(stderr, "%s\n", fill.status().ToString().c_str()), 1;
    auto warm = TimeFirstToken(Options(a, model, true), messages);  // the restart
    auto cold = TimeFirstToken(Options(a, model, false), messages);
    if (!warm.ok() || !cold.ok()) return std::fprintf(stderr, "engine failed\n"), 1;
    const uint64_t bytes = RecordBytes(a.work_dir + "/cache");
    const double read_ms = PlainRead(a.work_dir + "/cache");
    const auto& u = warm->r.usage;
    const double restore_ms = std::max(0.001, u.restore_ms);  // lookup, disk reads, assembly, set
    // The restore's rate over the state bytes it set, against reading the record files.
    const double restore_bw = double(u.restored_bytes) / restore_ms, read_bw = bytes / read_ms;
    std::printf("%3lld  %6d %6d  %9.1f  %11.1f  %10.1f  %13.1f  %11.1f%%  %15.1f  %12.1f  %9.3f\n",
                (long long)rep, u.prompt_tokens, u.cached_tokens, bytes / 1048576.0,
                u.restored_bytes / 1048576.0, restore_ms,
                read_ms, 100.0 * restore_bw / read_bw, warm->ttft_ms, cold->ttft_ms,
                warm->ttft_ms / cold->ttft_ms);
    if (warm->r.tokens != cold->r.tokens) std::printf("     output differs from cold!\n");
    if (rep == 0) PrintRecordSizes(a.work_dir + "/cache", a.block_size);
    sum_restore_bw += restore_bw, sum_read_bw += read_bw;
    sum_warm += warm->ttft_ms, sum_cold += cold->ttft_ms;
  }
  std::printf("\nrestore throughput from disk / plain sequential read: %.1f%% (target >= 50%%)\n",
              100.0 * sum_restore_bw / sum_read_bw);
  std::printf("restart-to-first-token / cold (--no-cache) first token: %.3f\n", sum_warm / sum_cold);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::Flags flags("disk-bench", "Disk tier after a restart: restore throughput and first token.");
  flags.String("--arch", &a.arch, "test-model architecture");
  flags.String("--shape", &a.shape, "test-model shape (tiny, small, medium)");
  flags.String("--model", &a.model, "use this GGUF instead of generating one");
  flags.String("--work-dir", &a.work_dir, "scratch dir (its cache/ is wiped per rep)");
  flags.Int("--tokens", &a.tokens, "prompt length, about");
  flags.Int("--reps", &a.reps, "repetitions");
  flags.Int("--threads", &a.threads, "CPU threads, 0 = all");
  flags.Int("--block-size", &a.block_size, "cache block size");
  return cli::RunWithFlags(flags, argc, argv, [&] { return Run(a); }, 1);
}
