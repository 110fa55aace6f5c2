// PrefixCache: the RAM Tier of the prompt cache and its index.
//
// What it stores, per domain (DomainRoot): a trie of Blocks keyed by ChainHash. A Block node
// holds the Block's tokens (always compared on a hit; a hash alone is never trusted), its rows
// payload (sliceable KV rows; absent for pure recurrent models, where the node is a
// placeholder that only holds the chain), optionally a Snapshot at the Block's end, and Tails:
// entries for a partial Block [kB, P) holding the Tail rows and/or the Snapshot at P.
//
// Restorable prefix P (what Lookup returns):
//   has_rows && !needs_snapshot (pure attention): any P up to the matched tokens; P may end
//     inside a stored Block or Tail (RowSpan::n_tokens tells the engine where to slice).
//   needs_snapshot (recurrent, SWA, hybrid): only a P with a Snapshot: a Block end that has one
//     or the end of a Tail. Rows (when has_rows) cover [0,P) whole.
//   !has_rows (pure recurrent): Match::rows is empty; the chain of tokens is still verified.
//
// Budget: the memory of the payloads held by the cache (PayloadMemory: their allocations)
// never exceeds ram_budget_bytes. Pinning: an entry whose payload is referenced outside the
// cache (a Match being restored, or the inserter still holding its PayloadRef) is never
// evicted; its bytes stay counted until the cache drops it after the pin is released. An
// insert that cannot make room is refused.
//
// Eviction: least recently used first, among entries nothing else depends on (Snapshots,
// Tails, and rows of Blocks without children, Tails or Snapshot — a placeholder's 0-byte rows
// included), so a Block always outlives what depends on it and empty nodes are removed at once. Before dropping a Snapshot or Tail,
// the retention policy (retention.h) is asked which boundary Snapshot of the victim's chain
// to thin instead. See docs/cache.md.
//
// Thread-safety: every method may be called from any thread. One mutex guards the index; it is
// held only for index operations: hashing the request runs outside it and payload bytes are
// never copied under it.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "cache/block_listener.h"
#include "cache/chain_hash.h"
#include "cache/prefix_inventory.h"
#include "cache/stats.h"
#include "cache/types.h"
#include "util/status.h"

namespace prefixd::cache {

class PrefixCache {
 public:
  using ChainHashFn = ChainHash (*)(const ChainHash& parent, std::span<const Token> tokens);

  struct Options {
    size_t block_size = 256;      // B. REQUIRES: > 0
    size_t ram_budget_bytes = 0;  // payload memory the RAM Tier may hold
    bool has_rows = true;         // the model has sliceable attention rows (false: mamba2)
    bool needs_snapshot = false;  // the model has non-sliceable state (recurrent, SWA)
    size_t dense_blocks = 4;      // retention: boundary Snapshots kept dense near the newest
    size_t evicted_memory = 4096; // evicted ChainHashes remembered to report kEvicted
    ChainHashFn chain_hash = nullptr;  // tests only: a weak hash to provoke collisions
    BlockListener* listener = nullptr;  // told of Blocks added and removed (block_listener.h);
                                        // null: nobody. REQUIRES: outlives the cache
  };

  // Rows of one Block (or Tail) and how many of its leading tokens the match uses. The engine
  // slices when n_tokens is less than the payload's tokens.
  struct RowSpan {
    PayloadRef rows;
    size_t n_tokens = 0;
  };

  struct Match {
    size_t n_tokens = 0;         // P, the restorable prefix length
    std::vector<RowSpan> rows;   // in order, covering [0,P) exactly when has_rows
    PayloadRef snapshot;         // state at exactly P when needs_snapshot
    MissReason reason = MissReason::kNoEntry;  // why P is not longer (kNone: P == asked)
    size_t diverged_at = 0;      // tokens of the request that matched stored tokens
    SnapshotKind kind = SnapshotKind::kBlockBoundary;  // kind of the entry that ends at P
    size_t n_blocks = 0;         // full Blocks matched and verified (may exceed P / B)
    ChainHash chain{};           // ChainHash of the last of them (the domain root if none):
                                 // where a lower Tier continues the walk
  };

  // REQUIRES: opts.block_size > 0 and (opts.has_rows || opts.needs_snapshot).
  explicit PrefixCache(Options opts);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest restorable P <= min(max_len, tokens.size()). Callers pass tokens.size() - 1
  // so that one token is left to evaluate. The returned payloads are pinned until the Match
  // (and every copy of its PayloadRefs) is destroyed.
  Match Lookup(const Digest& domain, std::span<const Token> tokens, size_t max_len);

  // Publishes Block k = prefix_tokens.size() / B - 1 with its rows.
  // REQUIRES: prefix_tokens.size() is a positive multiple of B; rows is non-null when has_rows
  // (ignored otherwise: the node is a placeholder, and missing placeholder ancestors are
  // created). When has_rows, Blocks 0..k-1 must be present (else kRefusedNoParent).
  InsertOutcome InsertBlock(const Digest& domain, std::span<const Token> prefix_tokens,
                            PayloadRef rows);

  // Publishes Blocks first_block .. first_block + rows.size() - 1 of `tokens` in one walk:
  // what the engine does after slicing all new Blocks from one full state. Stops at the first
  // refusal. Returns that refusal, else kInserted if any Block was new, else kAlreadyPresent.
  // REQUIRES: (first_block + rows.size()) * B <= tokens.size().
  InsertOutcome InsertBlocks(const Digest& domain, std::span<const Token> tokens,
                             size_t first_block, std::span<const PayloadRef> rows);

  // Publishes what is needed to restore exactly P = prefix_tokens.size().
  // REQUIRES: P > 0; snapshot non-null iff needs_snapshot; tail_rows = rows
  // [floor(P/B)*B, P) non-null iff has_rows and P % B != 0. With has_rows, Blocks
  // 0..floor(P/B)-1 must be present. A pure-attention call with P % B == 0 stores nothing.
  InsertOutcome InsertSnapshot(const Digest& domain, std::span<const Token> prefix_tokens,
                               SnapshotKind kind, PayloadRef snapshot, PayloadRef tail_rows);

  // Evicts unpinned entries (same order as for an insert) until at most target_bytes are
  // held or only pinned ones remain. Returns the bytes now held.
  size_t Trim(size_t target_bytes);

  Stats GetStats() const;

  // One PrefixSummary per prefix tree held (prefix_inventory.h), in no particular order.
  // O(entries) under the lock; copies no payload.
  std::vector<PrefixSummary> ListPrefixes() const;
  // Evicts every entry of the prefix tree `root` of `domain` that is not pinned (a restore in
  // progress keeps its entries, and the Blocks they depend on). Returns the entries evicted:
  // 0 when the tree is not held.
  size_t EvictPrefix(const Digest& domain, const ChainHash& root);

  // Drops every entry (pinned payloads stay alive with their holders) and keeps the counters.
  void Clear();
  // BlockIndex::Announce under the lock: tells the listener what RAM holds, and withdraws
  // from RAM the Blocks of `held_below` it does not hold.
  void AnnounceBlocks(std::span<const BlockRef> held_below) const;
  // BlockIndex::ReportAllRemoved under the lock: for a process that stops.
  void ReportAllRemoved() const;

  // Checks the index invariants (links, byte accounting, eviction list, budget). For tests
  // and debug builds: O(entries).
  Status CheckConsistency() const;

  const Options& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::cache
