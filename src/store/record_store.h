// RecordStore: a store of cache records below the RAM Tier, as the cache's tier policy sees it
// (cache/store_tier.h). Records are in the format of docs/disk-format.md and are identified by
// (key, kind). Implemented by the disk tier (DiskStore) and the shared tier (RedisStore).
//
// Contract for every implementation:
//   - PutAsync never blocks on I/O: the record is written behind the caller, or dropped and
//     counted (a full queue, a store that is down).
//   - Read returns only a record whose checksums and sizes verified, with its header as stored;
//     NotFound when there is none (also when it vanished after Contains said yes).
//   - Contains / ContainsAll may answer yes for a record a later Read cannot return.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "store/record.h"
#include "util/status.h"

namespace prefixd::store {

class RecordStore {
 public:
  virtual ~RecordStore() = default;

  // Queues `payload` for writing behind the caller; false when dropped (counted).
  // REQUIRES: payload != nullptr.
  virtual bool PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) = 0;
  // The verified record; NotFound, Corruption (the record is dropped) or IOError.
  virtual Result<Record> Read(const Key& key, RecordKind kind) = 0;
  // True when (key, kind) is stored, as far as the store knows without reading it.
  virtual bool Contains(const Key& key, RecordKind kind) = 0;
  // Contains for each id, in order. A remote store answers all of them in one round trip.
  virtual std::vector<bool> ContainsAll(std::span<const RecordId> ids);
  // Deletes a record. NotFound when there is none.
  virtual Status Remove(const Key& key, RecordKind kind) = 0;
};

}  // namespace prefixd::store
