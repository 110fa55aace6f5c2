// Vocabulary types of the prompt cache: tokens, chain hashes, payloads, snapshot kinds and
// miss reasons. Plain values; safe to copy and share between threads.
//
// Ownership: a Payload is immutable once published. The cache and every caller that restores
// from it share it through a PayloadRef; the bytes are freed when the last reference goes.
// The bytes are opaque to the cache (the engine's serialized KV rows or snapshot); only their
// size counts against a Tier's budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "util/hash.h"

namespace prefixd::cache {

using Token = int32_t;

// h_k = SHA-256("block" || h_{k-1} || tokens of Block k); h_{-1} is the domain root.
using ChainHash = prefixd::Digest;

struct Payload {
  std::vector<uint8_t> bytes;
  Payload() = default;
  Payload(const Payload&) = delete;
  Payload& operator=(const Payload&) = delete;
  // A large buffer goes back to the process's BufferPool: the next payload read or taken
  // reuses its pages (util/buffer_pool.h).
  ~Payload();
};
using PayloadRef = std::shared_ptr<const Payload>;

inline size_t PayloadBytes(const PayloadRef& p) { return p ? p->bytes.size() : 0; }
// The memory a payload holds: its allocation, which may exceed its bytes (a pooled buffer
// serves any size up to a quarter below its own, util/buffer_pool.h; a record read from disk
// keeps the room its header took). What the RAM tier's budget bounds.
inline size_t PayloadMemory(const PayloadRef& p) { return p ? p->bytes.capacity() : 0; }
inline PayloadRef MakePayload(std::vector<uint8_t> bytes) {
  auto p = std::make_shared<Payload>();
  p->bytes = std::move(bytes);
  return p;
}

// Why a Snapshot was taken. Every kind above kBlockBoundary has a higher retention value:
// the retention policy thins kBlockBoundary Snapshots first and never drops the others before
// them.
enum class SnapshotKind : uint8_t {
  kBlockBoundary = 0,  // end of a Block, taken only to make restores dense
  kMessage = 1,        // end of the system prompt, start of a user message
  kTail = 2,           // end of the last message, before the generation prompt
  kBranch = 3,         // where this request diverged from the longest cached path
  kGenerationEnd = 4,  // end of a generation
};
inline constexpr size_t kSnapshotKindCount = 5;

// Why a prefix was not restored further: one vocabulary for the cache's lookups, the engine's
// results, logs, metrics and JSON. A Lookup gives the first six (kNone: it restored everything
// asked for, the only reason a one-token prompt can have); the engine adds the last three.
enum class MissReason : uint8_t {
  kNone = 0,
  kNoEntry,             // nothing is stored past the restorable prefix
  kDiverged,            // stored entries continue, but differ from the request at diverged_at
  kNoSnapshot,          // tokens matched further, but no Snapshot at a later restorable point
  kEvicted,             // the next Block was stored once and has been evicted
  kVerificationFailed,  // a chain hash matched but the stored tokens did not: not served
  kNotMissed,           // a request's: a hit, or the cache was not asked (it is off)
  kDisabled,            // counted for a request with kNotMissed that reused nothing (stats)
  kRestoreFailed,       // a restore was refused: the request prefilled cold
};
inline constexpr size_t kMissReasonCount = 6;  // the reasons a Lookup gives (Stats arrays)
// "none", "no_entry", "diverged", "no_snapshot", "evicted", "verification_failed", "",
// "disabled", "restore_failed": the names logs, metrics and JSON use.
const char* MissReasonName(MissReason reason);

// Where a prefix came from: a lookup's lowest tier that added to it (kRam, kDisk, kRemote), or
// for a request also kNone (nothing reused) and kSlot (its slot's sequence held it already).
enum class Tier : uint8_t { kNone, kSlot, kRam, kDisk, kRemote };
// "none", "slot", "ram", "disk", "remote": the names logs, metrics and JSON use.
const char* TierName(Tier tier);

}  // namespace prefixd::cache
