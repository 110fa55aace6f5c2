// Env: every file-system call prefixd makes goes through this interface, so that tests can
// replace it with a fault-injecting one (util/fault_env.h), as LevelDB does.
//
// Errors: every call returns a Status naming the path and the OS error. ENOSPC/EDQUOT map to
// ResourceExhausted; a missing file maps to NotFound; everything else to IOError.
//
// Thread safety: an Env is safe to use from many threads at once. A WritableFile or
// RandomAccessFile is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace prefixd {

// A file being written sequentially. Data is durable only after Sync() returns OK.
// The destructor closes the file if Close() was not called (errors are then ignored).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::span<const uint8_t> data) = 0;
  Status Append(std::string_view s) {
    return Append({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  virtual Status Sync() = 0;  // fdatasync/fsync: the appended bytes survive a power cut
  virtual Status Close() = 0;
};

// A file read at arbitrary offsets. Safe for concurrent Read() calls.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to `n` bytes at `offset` into `dst`; returns how many were read (short at EOF).
  virtual Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const = 0;
  // Brings [offset, offset + n) into the page cache, waiting for the device on this thread and
  // copying nothing out, so that a later Read of it (on another thread) is a memory copy. Best
  // effort: the POSIX file checks residency (mincore) and populates what is missing
  // (MADV_POPULATE_READ; on a kernel without it, posix_fadvise WILLNEED starts the reads).
  // Does nothing by default.
  virtual void Preload(uint64_t offset, uint64_t n) const { (void)offset, (void)n; }
};

// An exclusive lock on a file, held until destroyed (flock; released by the OS on process exit).
class FileLock {
 public:
  virtual ~FileLock() = default;
};

// What the POSIX Env creates is its owner's alone: a cache directory holds prompts' tokens and
// the server secret, which no other local user may read. The umask can only narrow these.
inline constexpr unsigned kPrivateFileMode = 0600;
inline constexpr unsigned kPrivateDirMode = 0700;

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never destroyed.
  static Env* Default();

  // Creates (or truncates) `path` for writing.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // Creates (or truncates) `path` for writing around the page cache where the file system
  // allows it (O_DIRECT): for large files written once and read rarely. Copying them into the
  // page cache costs more CPU than the device write itself (~2 s of kernel time a GiB against
  // ~0.2 s direct, on the machine this was measured on), CPU an inference server's decode
  // threads wait for. Same contract as NewWritableFile; where the file system refuses direct
  // I/O the file is written as NewWritableFile writes it. By default: NewWritableFile.
  virtual Result<std::unique_ptr<WritableFile>> NewUncachedWritableFile(const std::string& path) {
    return NewWritableFile(path);
  }
  // Opens `path` for appending, creating it if missing.
  virtual Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) = 0;
  virtual Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;

  virtual bool FileExists(const std::string& path) = 0;
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, without "." and "..", in no particular order.
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // OK when the directory already exists.
  virtual Status CreateDir(const std::string& dir) = 0;
  virtual Status RemoveDir(const std::string& dir) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Atomically replaces `to` with `from`. Durable only after SyncDir() of `to`'s directory.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // fsyncs a directory so that creations, renames and removals in it survive a power cut.
  virtual Status SyncDir(const std::string& dir) = 0;

  // Takes an exclusive, non-blocking lock on `path` (created if missing) and writes the pid
  // into it. When another process holds it: IOError "<what> is in use by pid N", where <what>
  // is `holder_name` (e.g. "cache dir /x").
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     const std::string& holder_name) = 0;

  virtual uint64_t NowUnixMillis() = 0;

  // Reads a whole file. Convenience over NewRandomAccessFile + FileSize.
  Result<std::vector<uint8_t>> ReadFile(const std::string& path);
  // Writes `data` to `path` durably: temp file, fsync, rename, fsync of the directory.
  Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> data);
  // Creates `dir` and every missing directory above it (CreateDir each: private); existing
  // ones are left as they are.
  Status CreateDirs(const std::string& dir);
};

// "a/b/c" -> "a/b"; "c" -> ".".
std::string DirName(const std::string& path);
// Joins with exactly one '/'.
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace prefixd
