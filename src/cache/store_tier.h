// DiskTier: joins the RAM Tier (PrefixCache) to the persistent disk store.
//
// Writes: everything the engine publishes to RAM is also queued to disk behind the request
// (write-through, written by the store's writer thread), so a RAM eviction loses nothing that
// the disk still holds, and a restart finds it. Records (docs/disk-format.md):
//   Block k      key h_k, kind kBlockRows, payload = rows (empty for a placeholder when the
//                model has no rows), tokens = the Block's tokens
//   Snapshot at a Block end: key h_k, kind kSnapshot
//   Tail [kB,P)  key TailKey(h_{k-1}, tail tokens), kind kTail (rows; empty without rows)
//   Snapshot at a Tail end: key TailKey(...), kind kSnapshot
// Block-boundary Snapshots (large for recurrent models, and only there to make restores dense)
// go to disk only at every kDiskBoundaryEvery-th Block; every other kind always does.
// Reads: Promote() continues the walk where the RAM match stopped (Match::chain / n_blocks),
// finds the longest prefix the disk can restore, reads and verifies those records (checksums in
// the store; the stored tokens against the request here) and inserts them into RAM. The
// engine then looks up RAM again. A record that fails any check is dropped, never served.
//
// Thread-safety: as the store and the PrefixCache (both internally synchronized).
#pragma once

#include <span>
#include <vector>

#include "cache/prefix_cache.h"
#include "store/disk_store.h"

namespace prefixd::cache {

class DiskTier {
 public:
  static constexpr size_t kDiskBoundaryEvery = 4;

  // REQUIRES: store and ram outlive this object.
  DiskTier(store::DiskStore& store, PrefixCache& ram);

  void SpillBlocks(const Digest& domain, std::span<const Token> tokens, size_t first_block,
                   std::span<const PayloadRef> rows);
  void SpillSnapshot(const Digest& domain, std::span<const Token> prefix_tokens,
                     SnapshotKind kind, const PayloadRef& snapshot, const PayloadRef& tail_rows);

  // Promotes into RAM what the disk can restore beyond `ram_match` for tokens[0, max_len).
  // Returns the restorable length the disk offered (0: nothing beyond RAM).
  size_t Promote(const Digest& domain, std::span<const Token> tokens, size_t max_len,
                 const PrefixCache::Match& ram_match);

  store::DiskStore& store() { return store_; }

 private:
  struct Walk;
  void Put(store::RecordMeta meta, const PayloadRef& payload);
  bool Load(const Digest& domain, std::span<const Token> tokens,
            const std::vector<ChainHash>& chain, size_t first, const Walk& best);
  PayloadRef ReadVerified(const Digest& key, store::RecordKind kind,
                          std::span<const Token> expected_tokens);

  store::DiskStore& store_;
  PrefixCache& ram_;
  const PrefixCache::Options& opts_;
};

}  // namespace prefixd::cache
