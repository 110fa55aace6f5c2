// Google Benchmark of the cache index on 100K-token sequences (B = 256: 390 Blocks).
// Payloads are small: this measures the index (hashing, verification, eviction), not memcpy.
// "per_block" is the time per Block of the sequence.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "cache/chain_hash.h"
#include "cache/prefix_cache.h"

namespace prefixd::cache {
namespace {

constexpr size_t kB = 256;
constexpr size_t kTokens = 100000;
constexpr size_t kBlocks = kTokens / kB;

std::vector<Token> Sequence() {
  std::vector<Token> t(kBlocks * kB);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<Token>((i * 7919) % 151936);
  return t;
}

PayloadRef Bytes(size_t n) {
  auto p = std::make_shared<Payload>();
  p->bytes.resize(n);
  return p;
}

std::vector<PayloadRef> BlockRows() {
  std::vector<PayloadRef> rows;
  for (size_t k = 0; k < kBlocks; ++k) rows.push_back(Bytes(64));
  return rows;
}

void PerBlock(benchmark::State& state) {
  state.counters["per_block"] = benchmark::Counter(
      static_cast<double>(kBlocks),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

const Digest kDomain = DomainRoot(DomainInputs{});

void BM_ChainHashes(benchmark::State& state) {
  auto t = Sequence();
  for (auto _ : state) benchmark::DoNotOptimize(ChainHashes(kDomain, t, kB));
  PerBlock(state);
}
BENCHMARK(BM_ChainHashes)->Unit(benchmark::kMicrosecond);

void BM_LookupAttention(benchmark::State& state) {
  auto t = Sequence();
  PrefixCache c(PrefixCache::Options{kB, 1ull << 30, true, false});
  c.InsertBlocks(kDomain, t, 0, BlockRows());
  for (auto _ : state) benchmark::DoNotOptimize(c.Lookup(kDomain, t, t.size() - 1));
  PerBlock(state);
}
BENCHMARK(BM_LookupAttention)->Unit(benchmark::kMicrosecond);

void BM_LookupHybrid(benchmark::State& state) {
  auto t = Sequence();
  PrefixCache c(PrefixCache::Options{kB, 1ull << 30, true, true});
  c.InsertBlocks(kDomain, t, 0, BlockRows());
  for (size_t k = 1; k <= kBlocks; k += 8) {
    c.InsertSnapshot(kDomain, std::span<const Token>(t).first(k * kB),
                     SnapshotKind::kBlockBoundary, Bytes(64), nullptr);
  }
  for (auto _ : state) benchmark::DoNotOptimize(c.Lookup(kDomain, t, t.size() - 1));
  PerBlock(state);
}
BENCHMARK(BM_LookupHybrid)->Unit(benchmark::kMicrosecond);

void BM_LookupMissFirstBlock(benchmark::State& state) {
  auto t = Sequence();
  PrefixCache c(PrefixCache::Options{kB, 1ull << 30, true, false});
  c.InsertBlocks(kDomain, t, 0, BlockRows());
  t[0] = -1;
  for (auto _ : state) benchmark::DoNotOptimize(c.Lookup(kDomain, t, t.size() - 1));
  PerBlock(state);
}
BENCHMARK(BM_LookupMissFirstBlock)->Unit(benchmark::kMicrosecond);

// The engine's path: all new Blocks sliced from one state, published in one call.
void BM_InsertBlocksBatch(benchmark::State& state) {
  auto t = Sequence();
  auto rows = BlockRows();
  for (auto _ : state) {
    PrefixCache c(PrefixCache::Options{kB, 1ull << 30, true, false});
    c.InsertBlocks(kDomain, t, 0, rows);
  }
  PerBlock(state);
}
BENCHMARK(BM_InsertBlocksBatch)->Unit(benchmark::kMicrosecond);

// One InsertBlock per Block, each with the whole prefix: O(prefix) verification per call.
void BM_InsertBlockOneByOne(benchmark::State& state) {
  auto t = Sequence();
  auto rows = BlockRows();
  for (auto _ : state) {
    PrefixCache c(PrefixCache::Options{kB, 1ull << 30, true, false});
    for (size_t k = 0; k < kBlocks; ++k) {
      c.InsertBlock(kDomain, std::span<const Token>(t).first((k + 1) * kB), rows[k]);
    }
  }
  PerBlock(state);
}
BENCHMARK(BM_InsertBlockOneByOne)->Unit(benchmark::kMicrosecond);

// Hybrid model under memory pressure: a boundary Snapshot per Block in a budget that holds
// ~40 of them, so almost every insert evicts through the retention policy.
void BM_InsertHybridWithThinning(benchmark::State& state) {
  auto t = Sequence();
  auto rows = BlockRows();
  for (auto _ : state) {
    PrefixCache c(PrefixCache::Options{kB, kBlocks * 64 + 40 * 1000, true, true});
    c.InsertBlocks(kDomain, t, 0, rows);
    for (size_t k = 1; k <= kBlocks; ++k) {
      // A fresh payload each time: one the caller still holds would be pinned.
      c.InsertSnapshot(kDomain, std::span<const Token>(t).first(k * kB),
                       SnapshotKind::kBlockBoundary, Bytes(1000), nullptr);
    }
  }
  PerBlock(state);
}
BENCHMARK(BM_InsertHybridWithThinning)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace prefixd::cache

BENCHMARK_MAIN();
