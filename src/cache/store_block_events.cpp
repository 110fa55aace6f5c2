#include "cache/store_block_events.h"

namespace prefixd::cache {

std::optional<BlockEvent> BlockEventOf(const store::RecordMeta& meta, BlockEvent::Kind kind,
                                       Tier tier, size_t block_size) {
  const bool whole_block = meta.position > 0 && meta.position % block_size == 0 &&
                           meta.tokens.size() == block_size;
  if (meta.kind != store::RecordKind::kBlockRows || meta.sealed || !whole_block) {
    return std::nullopt;
  }
  BlockEvent e;
  e.kind = kind;
  e.tier = tier;
  e.domain = meta.domain;
  e.hash = meta.key;
  e.parent = meta.parent;
  e.depth = meta.position / block_size;
  if (kind == BlockEvent::Kind::kStored) e.tokens.assign(meta.tokens.begin(), meta.tokens.end());
  return e;
}

void StoreBlockEvents::OnRecordAdded(const store::RecordMeta& meta) {
  if (auto e = BlockEventOf(meta, BlockEvent::Kind::kStored, tier_, block_size_)) {
    next_.OnBlockEvent(std::move(*e));
  }
}

void StoreBlockEvents::OnRecordRemoved(const store::RecordMeta& meta) {
  if (auto e = BlockEventOf(meta, BlockEvent::Kind::kRemoved, tier_, block_size_)) {
    next_.OnBlockEvent(std::move(*e));
  }
}

}  // namespace prefixd::cache
