// DiskStore: the persistent disk tier. Records (block rows, snapshots, tails) live as one
// self-describing, checksummed file each under a cache directory; a rebuildable index log
// remembers their headers and last-access times. Format and protocols: docs/disk-format.md.
//
// Guarantees:
//   - A record is listed or served only after its file was fsynced, renamed into place and its
//     directory fsynced. A crash or power cut at any moment loses at most records in flight.
//   - Get never returns bytes that fail a check: a bad record is quarantined (deleted and
//     dropped from the index), counted, and reported as Corruption.
//   - The disk tier's files, record files (including the one being written), the index log
//     and LOCK together, never exceed quota_bytes, but for a direct write's zero-padded last block
//     (< 4 KiB, until the file is cut back to its length) and the new copy of the log while a
//     compaction writes it: the least recently used records, of any domain, are evicted first.
//     Each record is charged QuotaBytesOf(meta): its file and twice its entry in the index
//     log, which is compacted as soon as it outgrows twice its live entries.
//   - One process at a time: Open locks the directory.
//
// Thread safety: every method may be called from any thread. Puts are written by one writer
// thread owned by the store; Get reads on the caller's thread without blocking on writes.
// Once open, the store's lock guards only its in-memory index: no file is read, written,
// renamed or deleted while it is held (Remove, Clear and eviction delete after releasing it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/record.h"
#include "store/record_listener.h"
#include "store/record_store.h"
#include "util/env.h"
#include "util/status.h"

namespace prefixd::store {

// What Open found and did while recovering the directory.
struct RecoveryReport {
  bool index_missing = false;      // no usable index.log: every record was read from its header
  uint64_t index_torn_bytes = 0;   // bytes skipped at the end of index.log
  std::string index_torn_reason;
  uint64_t records_kept = 0;
  uint64_t rebuilt_from_files = 0;  // records whose header was read because the index lacked them
  uint64_t dropped_temp = 0;        // torn writes (*.tmp) deleted
  uint64_t dropped_bad = 0;         // record files that failed a check, deleted
  uint64_t dropped_missing = 0;     // index entries whose file was gone
  uint64_t evicted_over_quota = 0;
  uint64_t unknown_files = 0;       // files left alone: unknown names or a newer format version
  std::vector<std::string> dropped;  // "records/ab/<name>: <reason>", at most 100
  double open_ms = 0;

  // One line, e.g. "kept 10 records; dropped 1 bad, 2 temp; index torn (37 bytes)".
  std::string ToString() const;
};

struct Stats {
  uint64_t records = 0;
  std::map<RecordKind, uint64_t> records_by_kind;
  uint64_t bytes = 0;  // record file bytes on disk (published records)
  uint64_t index_bytes = 0;  // bytes of the index log (index.log)
  uint64_t quota_bytes = 0;  // bounds bytes + index_bytes (see QuotaBytesOf)
  size_t queue_depth = 0;  // puts waiting for the writer

  uint64_t puts_accepted = 0;  // PutAsync returned true
  uint64_t puts_written = 0;   // published
  uint64_t puts_deduped = 0;   // already on disk or queued (accepted, nothing to do)
  uint64_t puts_cancelled = 0;  // removed or cleared before the writer got to them
  uint64_t put_fail_queue_full = 0;
  uint64_t put_fail_too_large = 0;  // larger than the whole quota, or too many tokens
  uint64_t put_fail_no_space = 0;   // ENOSPC
  uint64_t put_fail_io = 0;         // any other write error (read-only dir, EIO, ...)

  uint64_t gets = 0;
  uint64_t get_hits = 0;
  uint64_t get_not_found = 0;  // not indexed, or the file was deleted behind the store's back
  uint64_t get_corrupt = 0;
  uint64_t get_io_errors = 0;
  uint64_t quarantined = 0;  // by Get or Verify
  uint64_t evictions = 0;
  uint64_t removes = 0;
  uint64_t index_write_errors = 0;  // index log appends that failed (the index is rebuildable)
  uint64_t index_compactions = 0;   // index log rewrites after open

  // Every file of the tier: what quota_bytes bounds.
  uint64_t footprint_bytes() const { return bytes + index_bytes; }

  RecoveryReport recovery;
};

struct VerifyReport {
  uint64_t checked = 0;
  uint64_t bad = 0;                 // quarantined
  std::vector<std::string> problems;  // "<name>: <reason>"
};

// The quota a record takes: its file, and twice its Add entry in the index log (the log is
// compacted when it holds more than twice its live entries, so its dead entries never take
// more than the live ones). The log's 17-byte Header and LOCK's 16 are charged once per store.
uint64_t QuotaBytesOf(const RecordMeta& meta);

class DiskStore : public RecordStore {
 public:
  struct Options {
    std::string dir;                // created if missing
    uint64_t quota_bytes = 0;       // REQUIRES: > 0
    size_t writer_queue_depth = 64;
    // Payload bytes the queue may hold (it pins them in memory); one record is always taken.
    uint64_t writer_queue_bytes = uint64_t(1) << 30;
    Env* env = nullptr;             // default: Env::Default(); REQUIRES: outlives the store
  };

  // Opens (creating if needed) and recovers the cache dir; see docs/disk-format.md, "Recovery".
  // Fails with IOError "cache dir <dir> is in use by pid N" when another process has it open.
  static Result<std::unique_ptr<DiskStore>> Open(const Options& options);

  // Waits for queued puts to be written, saves last-access times, releases the lock.
  ~DiskStore() override = default;

  // Queues `payload` for writing behind the caller. Returns false (and counts it) when the
  // queue is full or the record has more than kMaxTokensPerRecord tokens. A record with the
  // same (key, kind) already stored or queued is not written again. Write failures (ENOSPC,
  // read-only dir, I/O) are counted and drop the record.
  // `meta.payload_bytes` and `meta.last_access_unix_ms` are set by the store.
  // REQUIRES: payload != nullptr.
  bool PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) override = 0;

  // Reads and verifies the record; NotFound, Corruption (the record is quarantined) or IOError.
  // Marks the record as used for LRU.
  virtual Result<std::vector<uint8_t>> Get(const Key& key, RecordKind kind) = 0;
  // As Get, returning the header read from the file too (for the caller to compare tokens).
  Result<Record> Read(const Key& key, RecordKind kind) override = 0;

  // True when (key, kind) is published (index only, no I/O; the file may still turn out bad
  // when read).
  bool Contains(const Key& key, RecordKind kind) override = 0;
  // The published records, optionally of one domain, most recently used last.
  virtual std::vector<RecordMeta> List(std::optional<prefixd::Digest> domain = {}) = 0;

  // Deletes a record (also a queued one). NotFound when there is none.
  Status Remove(const Key& key, RecordKind kind) override = 0;
  // Deletes every record (of `domain`, when given), queued ones included.
  virtual Status Clear(std::optional<prefixd::Digest> domain) = 0;
  // Waits until every put queued before the call is written (or failed), then saves
  // last-access times to the index log. Writes deferred by SetForegroundBusy go first.
  virtual void Flush() = 0;
  // While `busy` (the engine is prefilling or generating), the writer defers queued puts and
  // index maintenance, so write-behind does not take CPU from inference threads that wait on
  // each other at every op. A deferred put is still written when the queue is half full, when
  // it has waited kMaxWriteDefer, when Flush() waits for it, or when the store closes.
  virtual void SetForegroundBusy(bool busy) = 0;
  // Tells `listener` (null: nobody) of every record the index holds now, by ascending
  // position (a Block's parent before it), then of every record it gains or loses from now on
  // (store/record_listener.h), until the next call. Called again with the same listener, it
  // tells it everything again. REQUIRES: listener outlives this store or is replaced first.
  virtual void SetRecordListener(RecordListener* listener) = 0;

  // Reads every record in full; quarantines and reports the bad ones.
  virtual VerifyReport Verify() = 0;

  virtual Stats GetStats() = 0;
};

}  // namespace prefixd::store
