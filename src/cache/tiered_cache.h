// TieredCache: the tier policy of the prompt cache, in one place. The engine asks it for the
// longest restorable prefix and publishes into it; it never walks the tiers itself.
//
//   Lookup: RAM first; when RAM's prefix is short, the disk, then the shared tier (each walk
//     continues where the tier above stopped). What a lower tier adds is promoted into RAM
//     (from the shared tier also onto disk), and RAM is looked up again: a restore always
//     reads from RAM.
//   Insert: into RAM, and spilled behind the request to the disk and the shared tier (the same
//     records under the same keys in both).
//
// The shared tier is a network away: Lookup takes a Reach, so that the scheduler thread, which
// decodes every slot, looks at local tiers only; the request's own thread calls Promote (all
// tiers) before it queues.
//
// Thread-safety: every method may be called from any thread (the tiers synchronize).
#pragma once

#include <memory>
#include <span>

#include "cache/prefix_cache.h"
#include "cache/store_tier.h"
#include "store/record_store.h"

namespace prefixd::cache {

// Which tiers a lookup may read: kRam (RAM only), kLocal (RAM, disk) or kAll (also the
// shared tier).
enum class Reach { kRam, kLocal, kAll };

class TieredCache {
 public:
  struct Lower {
    store::RecordStore* disk = nullptr;    // null: no disk tier
    store::RecordStore* remote = nullptr;  // null: no shared tier
  };
  // REQUIRES: ram and the lower stores outlive this object.
  TieredCache(PrefixCache& ram, Lower lower);

  struct Found {
    PrefixCache::Match match;
    Tier tier = Tier::kRam;  // the lowest tier that added to the prefix
  };
  // The longest restorable prefix of tokens[0, max_len): RAM, then (while shorter than
  // max(good_enough, RAM's) and within `reach`) the disk and the shared tier, promoted.
  Found Lookup(const Digest& domain, std::span<const Token> tokens, size_t max_len,
               size_t good_enough, Reach reach);

  // What each tier offered when promoting every tier's prefix into RAM (0: nothing beyond the
  // tiers above): for the request's own thread, before it queues.
  //
  // `open_disk` (a RAM Tier with rows, and no shared tier): the disk's prefix, when longer
  // than RAM's, is opened instead (StoreTier::Open, `opened`) and not read into RAM, so that
  // the restore reads each payload once, from the page cache into the sequence.
  // When opening fails it is promoted as usual.
  struct Promoted {
    size_t ram = 0, disk = 0, remote = 0;
    std::shared_ptr<const OpenedPrefix> opened;
  };
  Promoted Promote(const Digest& domain, std::span<const Token> tokens, size_t max_len,
                   bool open_disk = false);
  // A reader found the payload of an opened disk record damaged: the disk drops it.
  void ReportCorrupt(const store::RecordMeta& meta);

  // PrefixCache::InsertBlocks, then spilled to the lower tiers.
  void InsertBlocks(const Digest& domain, std::span<const Token> tokens, size_t first_block,
                    std::span<const PayloadRef> rows);
  // PrefixCache::InsertSnapshot, then spilled to the lower tiers.
  void InsertSnapshot(const Digest& domain, std::span<const Token> prefix_tokens,
                      SnapshotKind kind, const PayloadRef& snapshot, const PayloadRef& tail_rows);

  bool has_lower() const { return disk_ || remote_; }
  PrefixCache& ram() { return ram_; }

 private:
  // Promotes from `tier` beyond `m`; when it offered more than max(floor, m's), looks RAM up
  // again into `m` and returns true.
  bool Deepen(StoreTier& tier, const Digest& domain, std::span<const Token> tokens,
              size_t max_len, size_t floor, PrefixCache::Match* m, size_t* offered);

  PrefixCache& ram_;
  std::unique_ptr<StoreTier> disk_;
  std::unique_ptr<StoreTier> remote_;
};


}  // namespace prefixd::cache
