#include "util/process_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace prefixd {
namespace {

// The heap's numbers are glibc's; under an allocator put in front (LD_PRELOAD) they read 0.
bool GlibcHeap() { return std::getenv("LD_PRELOAD") == nullptr; }

TEST(ProcessMemory, ResidentSizeFollowsTouchedMemory) {
  if (!GlibcHeap()) GTEST_SKIP() << "LD_PRELOAD: another allocator";
  const uint64_t before = ReadProcessMemory().resident_bytes;
  ASSERT_GT(before, 0u);
  constexpr size_t kBytes = size_t(64) << 20;
  char* p = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, kBytes);
  const ProcessMemory during = ReadProcessMemory();
  EXPECT_GE(during.resident_bytes, before + kBytes * 9 / 10);
  EXPECT_GE(during.heap_mapped_bytes, kBytes);  // that large a block is mapped on its own
  EXPECT_GE(during.heap_arenas, 1u);
  std::free(p);
  EXPECT_LT(ReadProcessMemory().resident_bytes, during.resident_bytes - kBytes / 2);
}

// Small blocks freed below a live one stay in the heap (free, resident) until a trim.
TEST(ProcessMemory, TrimGivesFreedHeapBack) {
  if (!GlibcHeap()) GTEST_SKIP() << "LD_PRELOAD: another allocator";
  std::vector<char*> blocks;
  for (int i = 0; i < 64 * 1024; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(1000)));
    std::memset(blocks.back(), 1, 1000);
  }
  for (size_t i = 0; i + 1 < blocks.size(); ++i) std::free(blocks[i]);  // the top one pins
  const ProcessMemory freed = ReadProcessMemory();
  EXPECT_GE(freed.heap_free_bytes, uint64_t(50) << 20);
  const uint64_t dropped = TrimAllocator();
  EXPECT_GE(dropped, uint64_t(40) << 20);
  EXPECT_GE(ReadProcessMemory().trims, 1u);
  EXPECT_GE(ReadProcessMemory().trimmed_bytes, dropped);
  EXPECT_LT(ReadProcessMemory().heap_free_bytes, freed.heap_free_bytes);
  std::free(blocks.back());
}

TEST(ProcessMemory, GaugesAddUpByOwner) {
  static MemoryGauge a("test_owner_a");
  static MemoryGauge b("test_owner_b");
  a.Add(1000);
  b.Add(5);
  a.Add(-400);
  auto owners = MemoryByOwner();
  auto find = [&](const std::string& name) -> uint64_t {
    for (const auto& [owner, bytes] : owners) {
      if (owner == name) return bytes;
    }
    return UINT64_MAX;
  };
  EXPECT_EQ(find("test_owner_a"), 600u);
  EXPECT_EQ(find("test_owner_b"), 5u);
  b.Add(-10);  // more freed than taken reads as 0, never as a wrapped huge number
  EXPECT_EQ(b.bytes(), 0u);
}

}  // namespace
}  // namespace prefixd
