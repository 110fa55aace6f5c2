// The process's memory, for an operator who leaves a server up for weeks: its resident size,
// what the allocator holds, the bytes each long-lived owner holds (MemoryGauge), and the
// allocator policy a long-running server sets (docs/deployment.md, "Memory over weeks").
//
// Thread-safety: every function and MemoryGauge method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace prefixd {

struct ProcessMemory {
  uint64_t resident_bytes = 0;  // VmRSS (/proc/self/statm); 0 where it cannot be read
  // glibc's malloc (mallinfo2), all 0 under another allocator (LD_PRELOAD): bytes of its
  // arenas handed out and not freed; bytes freed but kept in its arenas (not given back to the
  // kernel); and blocks too large for an arena, mapped one by one (llama.cpp's KV cache and
  // compute buffers), at their full size: their pages are resident only once touched.
  uint64_t heap_in_use_bytes = 0;
  uint64_t heap_free_bytes = 0;
  uint64_t heap_mapped_bytes = 0;
  uint32_t heap_arenas = 0;  // malloc arenas in use (threads that allocate get their own)
  uint64_t trims = 0;          // TrimAllocator calls so far
  uint64_t trimmed_bytes = 0;  // the RSS they gave back
};

// Reads the process's memory now: one read of /proc/self/statm and, under glibc, one
// mallinfo2 (it walks every arena's free lists under their locks: milliseconds with many
// arenas, so call it for a scrape, not per request).
ProcessMemory ReadProcessMemory();

// The bytes one owner holds (a memo, a ring, an index), under a name that leaves the process
// in /metrics (`prefixd_memory_bytes{owner="..."}`). Gauges live for the process: make each a
// function-local static (`static MemoryGauge g("render_memo")`). Several objects of one kind
// (two engines in a bench) add into the same gauge: an owner adds what it takes and subtracts
// what it frees, also when it is destroyed.
class MemoryGauge {
 public:
  // REQUIRES: `owner` is a string literal, unique among gauges.
  explicit MemoryGauge(const char* owner);
  MemoryGauge(const MemoryGauge&) = delete;
  MemoryGauge& operator=(const MemoryGauge&) = delete;

  void Add(int64_t delta) { bytes_.fetch_add(delta, std::memory_order_relaxed); }
  uint64_t bytes() const {
    const int64_t v = bytes_.load(std::memory_order_relaxed);
    return v > 0 ? uint64_t(v) : 0;
  }
  const char* owner() const { return owner_; }

 private:
  const char* owner_;
  std::atomic<int64_t> bytes_{0};
};

// The heap memory one allocation of `n` bytes takes under glibc's malloc: an 8-byte header,
// rounded up to 16 bytes, at least 32. What an owner of many small nodes (a map's, a list's)
// counts per node, so that its gauge is the heap it holds, not the sizes it asked for.
constexpr size_t HeapChunkBytes(size_t n) {
  const size_t chunk = (n + 8 + 15) & ~size_t(15);
  return chunk < 32 ? 32 : chunk;
}

// Every gauge created so far, by owner name (sorted), with its bytes now.
std::vector<std::pair<std::string, uint64_t>> MemoryByOwner();

// The allocator policy of a server (glibc malloc; a no-op under another allocator):
// `max_arenas` caps malloc's arenas (M_ARENA_MAX; 0 leaves glibc's default of 8 per core).
// Each thread that allocates while another holds an arena gets one of its own, and memory
// freed into an arena stays with it, so HTTP threads that come and go leave free memory
// scattered over many arenas; a few arenas keep it where the next allocation finds it.
void SetUpAllocator(int max_arenas);

// Gives the allocator's free memory back to the kernel (malloc_trim(0): every arena, also
// the middle of the heap, page by page). Costs milliseconds with a large heap: call it when
// the process goes idle, not per request (IdleTrimmer). Returns the bytes the resident size
// dropped by; counted in ProcessMemory's trims and trimmed_bytes.
uint64_t TrimAllocator();

}  // namespace prefixd
