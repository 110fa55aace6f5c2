#include "util/process_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "util/mutex.h"

namespace prefixd {

namespace {

std::atomic<uint64_t> g_trims{0};
std::atomic<uint64_t> g_trimmed_bytes{0};

struct Registry {
  Mutex mu;
  std::vector<const MemoryGauge*> gauges PREFIXD_GUARDED_BY(mu);
};

Registry& Gauges() {
  static Registry* r = new Registry();  // outlives every static gauge
  return *r;
}

uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * uint64_t(::sysconf(_SC_PAGESIZE)) : 0;
}

#if defined(__GLIBC__)
// True when malloc is glibc's own (not jemalloc or tcmalloc put in front by LD_PRELOAD): by
// the time anyone asks, the C++ runtime has allocated, so glibc's arenas hold something only
// when glibc's malloc served it.
bool GlibcMalloc() {
  struct mallinfo2 mi = mallinfo2();
  return mi.arena + mi.hblkhd > 0;
}

uint32_t CountArenas() {
  // malloc_info's XML has one <heap nr="N"> per arena; count them from a memory stream.
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = ::open_memstream(&buf, &len);
  if (f == nullptr) return 0;
  ::malloc_info(0, f);
  std::fclose(f);
  uint32_t n = 0;
  for (const char* p = buf; p != nullptr && (p = std::strstr(p, "<heap nr=")) != nullptr; ++p) ++n;
  std::free(buf);
  return n;
}
#endif

}  // namespace

MemoryGauge::MemoryGauge(const char* owner) : owner_(owner) {
  Registry& r = Gauges();
  MutexLock lock(&r.mu);
  r.gauges.push_back(this);
}

std::vector<std::pair<std::string, uint64_t>> MemoryByOwner() {
  Registry& r = Gauges();
  std::vector<std::pair<std::string, uint64_t>> out;
  {
    MutexLock lock(&r.mu);
    for (const MemoryGauge* g : r.gauges) out.emplace_back(g->owner(), g->bytes());
  }
  std::sort(out.begin(), out.end());
  return out;
}

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  m.resident_bytes = ResidentBytes();
  m.trims = g_trims.load();
  m.trimmed_bytes = g_trimmed_bytes.load();
#if defined(__GLIBC__)
  if (GlibcMalloc()) {
    struct mallinfo2 mi = mallinfo2();
    m.heap_in_use_bytes = mi.uordblks;
    m.heap_free_bytes = mi.fordblks;
    m.heap_mapped_bytes = mi.hblkhd;
    m.heap_arenas = CountArenas();
  }
#endif
  return m;
}

void SetUpAllocator(int max_arenas) {
#if defined(__GLIBC__)
  if (max_arenas > 0 && GlibcMalloc()) ::mallopt(M_ARENA_MAX, max_arenas);
#else
  (void)max_arenas;
#endif
}

uint64_t TrimAllocator() {
#if defined(__GLIBC__)
  if (!GlibcMalloc()) return 0;
  const uint64_t before = ResidentBytes();
  ::malloc_trim(0);
  const uint64_t after = ResidentBytes();
  const uint64_t dropped = before > after ? before - after : 0;
  ++g_trims;
  g_trimmed_bytes += dropped;
  return dropped;
#else
  return 0;
#endif
}

}  // namespace prefixd
