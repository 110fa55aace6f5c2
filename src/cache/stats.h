// Counters and gauges of the prompt cache. A plain copyable snapshot, taken under the cache's
// lock by PrefixCache::GetStats(); it feeds /metrics.
#pragma once

#include <array>
#include <cstdint>

#include "cache/types.h"

namespace prefixd::cache {

// What an insert did. Every kRefused* outcome also counts in Stats::refused_inserts.
enum class InsertOutcome : uint8_t {
  kInserted = 0,
  kAlreadyPresent,   // an equal entry was there; its retention kind was raised if lower
  kRefusedTooLarge,  // larger than the whole budget
  kRefusedNoRoom,    // everything that could make room is pinned by a restore in progress
  kRefusedNoParent,  // the Blocks before it are not in the cache (with rows, when has_rows)
  kRefusedInvalid,   // arguments break the REQUIRES of the call
  kRefusedConflict,  // a ChainHash collision with different stored tokens: not stored
};
inline constexpr size_t kInsertOutcomeCount = 7;
inline bool IsRefused(InsertOutcome o) { return o >= InsertOutcome::kRefusedTooLarge; }

// Payload bytes held in one Tier, by what they are.
struct TierBytes {
  uint64_t rows = 0;       // Block rows
  uint64_t snapshots = 0;  // Snapshots at Block ends
  uint64_t tails = 0;      // Tail rows and Tail Snapshots
  uint64_t total() const { return rows + snapshots + tails; }
};

struct Stats {
  // Lookups.
  uint64_t lookups = 0;
  uint64_t lookup_tokens = 0;  // sum of min(max_len, tokens.size()): what was asked for
  uint64_t hits = 0;           // lookups that restored P > 0 tokens
  uint64_t hit_tokens = 0;     // sum of P
  std::array<uint64_t, kMissReasonCount> misses{};      // P == 0, by MissReason
  std::array<uint64_t, kMissReasonCount> short_hits{};  // 0 < P < asked, by MissReason
  uint64_t verification_failures = 0;  // stored tokens differed from a matching ChainHash

  // Inserts.
  std::array<uint64_t, kInsertOutcomeCount> inserts{};  // by InsertOutcome
  uint64_t refused_inserts = 0;

  // Eviction.
  uint64_t evictions = 0;         // entries dropped to make room or by Trim()
  uint64_t evicted_bytes = 0;
  uint64_t thinned_snapshots = 0; // of those, boundary Snapshots chosen by the retention policy

  // Gauges: what is held now.
  TierBytes ram;                  // the RAM Tier; the disk Tier will get its own TierBytes
  uint64_t ram_budget_bytes = 0;
  uint64_t blocks = 0;            // Block nodes, placeholders included
  uint64_t snapshots = 0;         // Snapshots at Block ends
  uint64_t tails = 0;
};

}  // namespace prefixd::cache
