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
#include "util/env.h"
#include "util/status.h"

namespace prefixd::store {

// A record whose front (header, sizes) verified and whose payload was not read
// (RecordStore::OpenRecord): the caller reads the payload from `file` at payload_offset, wherever it
// wants the bytes, and uses none of them before PayloadMatches said yes for what it read.
struct OpenedRecord {
  RecordMeta meta;  // payload_bytes set
  std::shared_ptr<const RandomAccessFile> file;
  uint64_t payload_offset = 0;
  uint32_t trailer = 0;  // the payload check as stored (docs/disk-format.md)
};

// True when `payload_crc` (Crc32c of the payload's bytes, however they were taken apart and
// joined with Crc32cCombine) is the check `rec` stores.
bool PayloadMatches(const OpenedRecord& rec, uint32_t payload_crc);

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
  // Read for each id, in order (each result as Read's). A remote store reads all of them in one
  // round trip.
  virtual std::vector<Result<Record>> ReadAll(std::span<const RecordId> ids);
  // Deletes a record. NotFound when there is none.
  virtual Status Remove(const Key& key, RecordKind kind) = 0;
  // The record with its front verified and its payload left in the file (OpenedRecord): for a
  // reader that reads the bytes straight to where it needs them. NotSupported by a store that
  // has no files (the default); otherwise as Read.
  virtual Result<OpenedRecord> OpenRecord(const Key& key, RecordKind kind);
  // A reader of an OpenedRecord found its payload damaged: the record is dropped and counted
  // as Read counts a damaged record. The default removes it.
  virtual void ReportCorrupt(const Key& key, RecordKind kind) { Remove(key, kind); }
};

}  // namespace prefixd::store
