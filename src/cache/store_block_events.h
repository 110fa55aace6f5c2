// StoreBlockEvents: a lower tier's Blocks as BlockEvents (block_listener.h), so that a router
// sees a prefix held only on disk as held. It listens to the store's index
// (store/record_listener.h) and reports each Block record (RecordKind::kBlockRows, the record
// of Block k: key h_k, parent h_{k-1} or the domain root, position (k + 1) * B, the Block's
// tokens) as a Block of `tier`: kStored when the index gains it, kRemoved when it loses it.
// Snapshots, Tails and embeddings are not Blocks and are not reported; nor are sealed records
// (store/sealed_store.h), whose tokens are encrypted inside the payload.
//
// Thread-safety: as the store calls it (under its index lock); it keeps no state of its own.
#pragma once

#include "cache/block_listener.h"
#include "store/record_listener.h"

namespace prefixd::cache {

// The BlockEvent a record stands for: nullopt when it is not a reportable Block.
std::optional<BlockEvent> BlockEventOf(const store::RecordMeta& meta, BlockEvent::Kind kind,
                                       Tier tier, size_t block_size);

class StoreBlockEvents : public store::RecordListener {
 public:
  // REQUIRES: next outlives this object; block_size is the cache's B.
  StoreBlockEvents(BlockListener& next, Tier tier, size_t block_size)
      : next_(next), tier_(tier), block_size_(block_size) {}

  void OnRecordAdded(const store::RecordMeta& meta) override;
  void OnRecordRemoved(const store::RecordMeta& meta) override;

 private:
  BlockListener& next_;
  const Tier tier_;
  const size_t block_size_;
};

}  // namespace prefixd::cache
