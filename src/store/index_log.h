// IndexLog: the disk tier's index, a checksummed append-only log of Add / Remove / Touch
// entries (docs/disk-format.md, "The index"). The record files are the truth; the log only
// saves reading every header at start-up, so appends are not fsynced and a torn tail is
// tolerated (Replay stops at the first bad entry and reports the bytes it skipped).
//
// Thread safety: none; the DiskStore serialises calls on its log mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "store/record.h"
#include "util/env.h"

namespace prefixd::store {

// What the index knows about one record file.
struct IndexEntry {
  RecordMeta meta;  // with payload_bytes and last_access_unix_ms
  uint64_t file_bytes = 0;
  uint64_t created_ms = 0;
};

struct LogReplay {
  std::map<RecordId, IndexEntry> entries;
  bool missing = false;        // no log file
  bool bad_version = false;    // a log this version cannot read (ignored)
  uint64_t torn_bytes = 0;     // bytes after the last whole entry
  uint64_t n_entries = 0;      // entries read (Header excluded)
  uint64_t bytes = 0;          // bytes of the whole entries read (Header included)
  std::string torn_reason;     // what was wrong at the torn tail
};

// The bytes of the log's Header entry.
inline constexpr uint64_t kLogHeaderEntryBytes = 9 + 8;
// The bytes of the Add entry for a record of `meta` (as Rewrite writes one per live record).
inline uint64_t LogAddEntryBytes(const RecordMeta& meta) {
  return 9 + 16 + HeaderBodyBytes(meta.tokens.size());
}

class IndexLog {
 public:
  // Reads `path` (a missing file is not an error: `missing` is set).
  static Result<LogReplay> Replay(Env* env, const std::string& path);

  // Writes a new log holding exactly `entries` durably (temp, fsync, rename, dir fsync) and
  // opens it for appending.
  static Result<std::unique_ptr<IndexLog>> Rewrite(Env* env, const std::string& path,
                                                   const std::vector<const IndexEntry*>& entries);
  // Opens an existing, whole log of `n_entries` entries and `bytes` bytes (as Replay read
  // them) for appending. REQUIRES: Replay found no torn tail.
  static Result<std::unique_ptr<IndexLog>> OpenForAppend(Env* env, const std::string& path,
                                                         uint64_t n_entries, uint64_t bytes);

  Status AppendAdd(const IndexEntry& e);
  Status AppendRemove(const RecordId& id);
  Status AppendTouch(const RecordId& id, uint64_t last_access_ms);
  // Entries in the file (not counting the Header).
  uint64_t n_entries() const { return n_entries_; }
  // Bytes in the file: the Header and every entry appended (a failed append counts too: part
  // of it may be there).
  uint64_t bytes() const { return bytes_; }

 private:
  IndexLog(std::unique_ptr<WritableFile> file, uint64_t n_entries, uint64_t bytes)
      : file_(std::move(file)), n_entries_(n_entries), bytes_(bytes) {}
  Status Append(uint8_t type, const std::vector<uint8_t>& body);

  std::unique_ptr<WritableFile> file_;
  uint64_t n_entries_;
  uint64_t bytes_;
};

}  // namespace prefixd::store
