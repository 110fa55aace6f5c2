// The shared tier's read path alone, against the Redis it reads: puts `--records` records of
// `--bytes` payload each into Redis through RedisStore, then reads them back `--reps` times,
// one GET each (Read) and in one pipelined round trip (ReadAll), verified as a restore reads
// them. Prints GB/s over the payload bytes. bench/run-remote-read-bench.sh runs it beside
// redis-benchmark's GET of the same value size on the same Redis (docs/bench.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "store/redis_store.h"
#include "util/flags.h"
#include "util/hash.h"

namespace prefixd {
namespace {

struct Args {
  std::string url;
  int64_t records = 8;
  int64_t bytes = 4 << 20;
  int64_t reps = 5;
};

store::RecordMeta MetaOf(uint32_t i, size_t bytes) {
  store::RecordMeta m;
  m.key = Sha256Of("remote read bench record " + std::to_string(i));
  m.domain = Sha256Of("remote read bench");
  m.kind = store::RecordKind::kBlockRows;
  m.position = 256 * (i + 1);
  m.tokens.assign(256, int32_t(i));
  m.payload_bytes = bytes;
  return m;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The best of `reps` timings of `read` (which returns false on any failed record).
template <class Read>
double BestSeconds(int64_t reps, Read&& read) {
  double best = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!read()) return -1;
    best = std::min(best, Seconds(t0));
  }
  return best;
}

int Run(const Args& a) {
  store::RedisStoreOptions o;
  o.url = a.url;
  o.command_timeout_ms = 30000;
  auto opened = store::RedisStore::Open(o);
  if (!opened.ok()) return std::fprintf(stderr, "%s\n", opened.status().ToString().c_str()), 1;
  store::RedisStore& s = **opened;
  std::vector<store::RecordId> ids;
  for (uint32_t i = 0; i < uint32_t(a.records); ++i) {
    store::RecordMeta m = MetaOf(i, size_t(a.bytes));
    ids.push_back(store::IdOf(m));
    auto payload = std::make_shared<std::vector<uint8_t>>(size_t(a.bytes), uint8_t(i));
    s.PutAsync(std::move(m), payload);
  }
  s.Flush();
  const double total = double(a.records) * double(a.bytes);
  // Both keep every record until the rep ends, as a restore does (the RAM tier holds them).
  const double one_each = BestSeconds(a.reps, [&] {
    std::vector<Result<store::Record>> held;
    for (const auto& id : ids) held.push_back(s.Read(id.key, id.kind));
    return std::all_of(held.begin(), held.end(), [](const auto& r) { return r.ok(); });
  });
  const double pipelined = BestSeconds(a.reps, [&] {
    for (const auto& r : s.ReadAll(ids)) {
      if (!r.ok()) return false;
    }
    return true;
  });
  if (one_each < 0 || pipelined < 0) return std::fprintf(stderr, "a read failed\n"), 1;
  std::printf("records %lld x %lld bytes, best of %lld\n", (long long)a.records,
              (long long)a.bytes, (long long)a.reps);
  std::printf("read one GET each: %.3f GB/s (%.1f ms)\n", total / one_each / 1e9, one_each * 1e3);
  std::printf("read pipelined:    %.3f GB/s (%.1f ms)\n", total / pipelined / 1e9,
              pipelined * 1e3);
  return 0;
}

}  // namespace
}  // namespace prefixd

int main(int argc, char** argv) {
  prefixd::Args a;
  prefixd::Flags flags("remote-read-bench", "the shared tier's read path against its Redis");
  flags.String("--remote-cache", &a.url, "redis://HOST:PORT of a Redis to fill (required)");
  flags.Int("--records", &a.records, "records put and read back");
  flags.Int("--bytes", &a.bytes, "payload bytes per record");
  flags.Int("--reps", &a.reps, "reads of all records; the best counts");
  return prefixd::RunWithFlags(flags, argc, argv, [&] { return prefixd::Run(a); }, 1);
}
