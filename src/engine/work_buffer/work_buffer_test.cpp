// llama.cpp patch 0019: ggml's CPU backend lays the per-thread scratch of its kernels (flash
// attention's Q, K, V and score tiles) out from its work buffer in whole vectors, and took that
// buffer from new[], which promises 16 bytes of alignment. Where the heap put it decided whether
// every 64-byte load and store of those tiles straddled two cache lines: two processes running
// the same kernels on the same tokens differed by ~15% in prefill time. The patched backend
// asks new[] for 64 bytes more and starts the buffer on the next cache line.
//
// This binary replaces the global operator new[] (every new[] in the process, ggml's included)
// with one that can hand out memory 16 bytes past a cache line, and records the sizes asked.
// Checked against the unpatched library: it asks exactly the plan's work size, so it has no room
// to align and the first test fails; the second holds on both (alignment moves no bits).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "engine/tensor_fill_test_util.h"

namespace {

std::atomic<bool> g_off_line{false};            // hand out memory 16 bytes past a cache line
std::atomic<size_t> g_largest_request{0};       // the largest new[] since the last reset

// Every block carries its raw pointer just before the returned one, so delete[] finds it
// whichever way the block was placed.
void* Allocate(size_t n) {
  const size_t pad = 64 + 16;
  void* raw = std::malloc(n + pad + sizeof(void*));
  if (raw == nullptr) throw std::bad_alloc();
  uintptr_t p = (reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + 63) & ~uintptr_t(63);
  if (g_off_line.load()) p += 16;
  reinterpret_cast<void**>(p)[-1] = raw;
  return reinterpret_cast<void*>(p);
}

void Release(void* p) {
  if (p != nullptr) std::free(static_cast<void**>(p)[-1]);
}

}  // namespace

void* operator new[](size_t n) {
  size_t seen = g_largest_request.load();
  while (n > seen && !g_largest_request.compare_exchange_weak(seen, n)) {
  }
  return Allocate(n);
}
void operator delete[](void* p) noexcept { Release(p); }
void operator delete[](void* p, size_t) noexcept { Release(p); }

namespace prefixd::engine {
namespace {

constexpr int kDk = 128, kRows = 96, kHeads = 4, kKv = 512;

struct Attention {
  std::vector<float> out;
  size_t work_size = 0;        // what the plan needs
  size_t largest_request = 0;  // the largest new[] while the backend computed
};

// One flash-attention op run by the CPU backend (the path llama.cpp's scheduler takes), its
// inputs made in a context of their own.
Attention Attend(bool off_line) {
  ggml_init_params params = {size_t(32) << 20, nullptr, false};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, kDk, kRows, kHeads);
  ggml_tensor* k = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, kDk, kKv, kHeads);
  ggml_tensor* v = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, kDk, kKv, kHeads);
  ggml_tensor* mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, kKv, kRows);
  for (int64_t i = 0; i < ggml_nelements(q); ++i) {
    static_cast<float*>(q->data)[i] = testing::FillValue(i, 1);
  }
  for (int64_t i = 0; i < ggml_nelements(k); ++i) {
    static_cast<ggml_fp16_t*>(k->data)[i] = ggml_fp32_to_fp16(testing::FillValue(i, 2));
    static_cast<ggml_fp16_t*>(v->data)[i] = ggml_fp32_to_fp16(testing::FillValue(i, 3));
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kKv; ++c) {
      static_cast<ggml_fp16_t*>(mask->data)[r * kKv + c] =
          ggml_fp32_to_fp16(c <= kKv - kRows + r ? 0.0f : -INFINITY);
    }
  }
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, 0.088f, 0.0f, 0.0f);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);

  Attention a;
  a.work_size = ggml_graph_plan(graph, 2, nullptr).work_size;
  ggml_backend_t cpu = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(cpu, 2);
  g_off_line = off_line;
  g_largest_request = 0;
  EXPECT_EQ(ggml_backend_graph_compute(cpu, graph), GGML_STATUS_SUCCESS);
  a.largest_request = g_largest_request.load();
  g_off_line = false;
  ggml_backend_free(cpu);
  a.out.assign(static_cast<const float*>(out->data),
               static_cast<const float*>(out->data) + ggml_nelements(out));
  ggml_free(ctx);
  return a;
}

TEST(CpuWorkBuffer, TheBackendAsksRoomToStartItsWorkBufferOnACacheLine) {
  const Attention a = Attend(/*off_line=*/true);
  ASSERT_GT(a.work_size, size_t(0)) << "flash attention needs scratch: the plan asks for none";
  EXPECT_GE(a.largest_request, a.work_size + 63)
      << "the work buffer was allocated without room to move it onto a cache line";
}

TEST(CpuWorkBuffer, WhereTheHeapPutsTheBufferMovesNoBit) {
  const Attention off = Attend(/*off_line=*/true);
  const Attention on = Attend(/*off_line=*/false);
  ASSERT_EQ(off.out.size(), size_t(kDk) * kRows * kHeads);
  EXPECT_EQ(std::memcmp(off.out.data(), on.out.data(), off.out.size() * sizeof(float)), 0);
  bool finite = true;
  for (float x : off.out) finite = finite && std::isfinite(x);
  EXPECT_TRUE(finite);
}

}  // namespace
}  // namespace prefixd::engine
