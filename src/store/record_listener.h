// RecordListener: what a store's index tells an observer as records enter and leave it, so
// that the cache can report a lower tier's Blocks (cache/store_block_events.h) the way it
// reports the RAM tier's (cache/block_listener.h).
//
// A record is added once it is durable and indexed (a write published, or found again when the
// store is opened) and removed when the index drops it (evicted under the quota, removed,
// cleared, or quarantined as damaged).
//
// Thread-safety: called with the store's index lock held, from whichever thread changed the
// index (the store's writer, a reader that found damage, Remove / Clear callers). REQUIRES of
// implementations: return at once, never block, never call back into the store.
#pragma once

#include "store/record.h"

namespace prefixd::store {

class RecordListener {
 public:
  virtual ~RecordListener() = default;
  virtual void OnRecordAdded(const RecordMeta& meta) = 0;
  virtual void OnRecordRemoved(const RecordMeta& meta) = 0;
};

}  // namespace prefixd::store
