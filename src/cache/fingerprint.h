// Model fingerprints: the SHA-256 of a file's content, hashed once per file identity.
//
// A 20 GB model is not re-hashed on every start: FingerprintMemo remembers the digest per file
// identity (device, inode, size, mtime in ns) in a small text file (e.g.
// <cache_dir>/fingerprints.tsv). Any change to the file changes its identity and forces a
// re-hash. The memo fails closed: every line carries a masked CRC32C, and a line that does not
// parse or check is dropped (it only costs a re-hash), never trusted.
//
// Memo file format (text, one record per line, fields separated by TAB):
//   line 1:  "prefixd-fingerprints" TAB "1"
//   records: dev  ino  size  mtime_ns  sha256-hex(64)  crc  (crc: 8 hex digits, masked CRC32C
//            of the record text before its last TAB)
// Saved by write-temp, fsync, rename, fsync-dir.
//
// Thread-safety: FingerprintMemo is internally locked; FileFingerprint may run concurrently
// on one memo (two threads may hash the same file once each).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "util/hash.h"
#include "util/mutex.h"
#include "util/status.h"

namespace prefixd::cache {

struct FileIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  auto Tie() const { return std::tie(dev, ino, size, mtime_ns); }
  bool operator==(const FileIdentity& o) const { return Tie() == o.Tie(); }
  bool operator<(const FileIdentity& o) const { return Tie() < o.Tie(); }
};

Result<FileIdentity> StatFileIdentity(const std::string& path);

// SHA-256 of the whole file, read in 1 MiB chunks.
Result<prefixd::Digest> HashFileContent(const std::string& path);

class FingerprintMemo {
 public:
  // The memo lives at memo_path; nothing is read until Load() (or the first FileFingerprint).
  explicit FingerprintMemo(std::string memo_path) : path_(std::move(memo_path)) {}

  // Reads the memo file. A missing file is an empty memo. Bad lines are dropped and counted.
  Status Load();
  // Writes the memo atomically (write temp, fsync, rename, fsync dir).
  Status Save() const;

  std::optional<prefixd::Digest> Get(const FileIdentity& id) const;
  void Put(const FileIdentity& id, const prefixd::Digest& digest);

  bool loaded() const;
  size_t size() const;
  size_t dropped_lines() const;
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  mutable Mutex mu_;
  bool loaded_ PREFIXD_GUARDED_BY(mu_) = false;
  size_t dropped_lines_ PREFIXD_GUARDED_BY(mu_) = 0;
  std::map<FileIdentity, prefixd::Digest> digests_ PREFIXD_GUARDED_BY(mu_);
};

// The content digest of the file at `path`: from the memo when its identity is known, else
// hashed, checked unchanged while it was read (else IOError), recorded and the memo saved. A
// failure to save the memo does not fail the call (the next start re-hashes).
Result<prefixd::Digest> FileFingerprint(const std::string& path, FingerprintMemo& memo);

}  // namespace prefixd::cache
