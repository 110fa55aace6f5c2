// StoreTier: joins the RAM Tier (PrefixCache) to one store of records below it: the disk
// (store::DiskStore) or the shared tier (store::RedisStore). The order of the tiers is
// TieredCache's (tiered_cache.h); this class moves records between one store and RAM.
//
// Records (docs/disk-format.md), the same in every store:
//   Block k      key h_k, kind kBlockRows, payload = rows (empty for a placeholder when the
//                model has no rows), tokens = the Block's tokens
//   Snapshot at a Block end: key h_k, kind kSnapshot
//   Tail [kB,P)  key TailKey(h_{k-1}, tail tokens), kind kTail (rows; empty without rows)
//   Snapshot at a Tail end: key TailKey(...), kind kSnapshot
// Block-boundary Snapshots (large for recurrent models, and only there to make restores dense)
// are spilled only at every kBoundaryEvery-th Block; every other kind always is.
// Reads: Promote() continues the walk where the RAM match stopped (Match::chain / n_blocks),
// finds the longest prefix the store can restore (asking about one Block level at a time with
// ContainsAll: one round trip each for a remote store), reads and verifies those records
// (checksums in the store; the stored tokens against the request here) and inserts them into
// RAM, and into `copy_to` when given. The caller then looks up RAM again. A record that fails
// any check is dropped, never served; a record gone between the walk and the read is a miss.
//
// Thread-safety: as the store and the PrefixCache (both internally synchronized).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "cache/prefix_cache.h"
#include "store/record_store.h"

namespace prefixd::cache {

// A prefix the store can restore, with its rows records opened and left in their files
// (StoreTier::Open): for a restore that reads each payload straight into its place in the
// sequence and checks it there. Nothing in it has been inserted into RAM.
struct OpenedPrefix {
  struct Rows {
    store::OpenedRecord record;  // tokens verified against the request
    size_t n_tokens = 0;         // of the record's tokens, those in the prefix
  };
  size_t n_tokens = 0;     // P
  std::vector<Rows> rows;  // Blocks from the first, then the Tail: [0, P) in order
  PayloadRef snapshot;     // the state at P when needs_snapshot: read and verified
  SnapshotKind kind = SnapshotKind::kMessage;
};

class StoreTier {
 public:
  static constexpr size_t kBoundaryEvery = 4;

  // REQUIRES: store, ram and copy_to (null: none) outlive this object.
  StoreTier(store::RecordStore& store, PrefixCache& ram, store::RecordStore* copy_to = nullptr);

  void SpillBlocks(const Digest& domain, std::span<const Token> tokens, size_t first_block,
                   std::span<const PayloadRef> rows);
  void SpillSnapshot(const Digest& domain, std::span<const Token> prefix_tokens,
                     SnapshotKind kind, const PayloadRef& snapshot, const PayloadRef& tail_rows);

  // Promotes into RAM what the store can restore beyond `ram_match` for tokens[0, max_len).
  // Returns the restorable length the store offered (0: nothing beyond RAM).
  size_t Promote(const Digest& domain, std::span<const Token> tokens, size_t max_len,
                 const PrefixCache::Match& ram_match);

  // The longest prefix of tokens[0, max_len) the store restores from the first Block on,
  // opened (OpenedPrefix); nullopt when it restores none longer than `beyond` tokens (what RAM
  // restores already: nothing is opened or read then) or a record failed a check (that one is
  // dropped). Only for a RAM Tier with rows.
  std::optional<OpenedPrefix> Open(const Digest& domain, std::span<const Token> tokens,
                                   size_t max_len, size_t beyond = 0);
  // A reader found an opened record's payload damaged: the store drops it.
  void ReportCorrupt(const store::RecordMeta& meta) { store_.ReportCorrupt(meta.key, meta.kind); }

 private:
  struct Walk;
  void Put(store::RecordMeta meta, const PayloadRef& payload);
  size_t ReachableBlocks(const std::vector<ChainHash>& chain, size_t from);
  Walk FindAtLevel(const Digest& domain, std::span<const Token> tokens,
                   const std::vector<ChainHash>& chain, size_t k, size_t max_len,
                   size_t ram_tokens);
  bool Load(const Digest& domain, std::span<const Token> tokens,
            const std::vector<ChainHash>& chain, size_t first, const Walk& best);
  PayloadRef Verified(const store::RecordId& id, Result<store::Record> rec,
                      std::span<const Token> expected);
  PayloadRef ReadVerified(const Digest& key, store::RecordKind kind,
                          std::span<const Token> expected_tokens);
  std::optional<store::OpenedRecord> OpenVerified(const Digest& key, store::RecordKind kind,
                                                  std::span<const Token> expected_tokens);
  Walk FindLongest(const Digest& domain, std::span<const Token> tokens,
                   const std::vector<ChainHash>& chain, size_t from_block, size_t max_len,
                   size_t ram_tokens);

  store::RecordStore& store_;
  PrefixCache& ram_;
  store::RecordStore* copy_to_;
  const PrefixCache::Options& opts_;
};

}  // namespace prefixd::cache
