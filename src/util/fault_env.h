// FaultEnv: an Env for tests that wraps a real one and injects the failures a storage engine
// must survive (modelled on LevelDB's fault_injection_test):
//
//   - a crash: after N mutating operations every further operation fails without effect (the
//     process is "dead"); DropUnsyncedData() then simulates the power cut that follows;
//   - a power cut: DropUnsyncedData() truncates every file to its last Sync()ed size, deletes
//     files whose directory entry was never made durable by SyncDir(), and undoes renames not
//     followed by SyncDir() (bringing back a file the rename replaced);
//   - the k-th operation of a kind fails once;
//   - ENOSPC once a byte budget of appends is spent (the part that fits is written);
//   - a read-only file system (every mutating call fails);
//   - a flipped bit in what a read returns.
//
// Not modelled: removals and directory creation are durable at once (a power cut never brings
// a removed file back). Sync() is tracked, not passed to the real disk, so tests stay fast.
//
// Paths must be spelled the same way on every call (the store builds them with JoinPath).
// Thread-safe: every call is serialised on one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "util/env.h"
#include "util/mutex.h"

namespace prefixd {

class FaultEnv : public Env {
 public:
  enum class Op { kOpenWrite, kAppend, kSync, kClose, kRename, kRemove, kSyncDir, kCreateDir,
                  kRead, kNumOps };

  // REQUIRES: `base` outlives this Env.
  explicit FaultEnv(Env* base = Env::Default());
  ~FaultEnv() override;

  // --- fault controls -------------------------------------------------------------------
  // After `n` more mutating operations (every Op but kRead), every call fails without effect.
  void CrashAfterOps(int64_t n);
  bool crashed() const;
  // The k-th (1-based, counted from now) operation of kind `op` fails once with `status`.
  void FailNthOp(Op op, int64_t k, Status status = Status::IOError("injected I/O error"));
  // Appends beyond `bytes` more bytes fail with ResourceExhausted (ENOSPC). -1 = unlimited.
  void SetNoSpaceAfterBytes(int64_t bytes);
  void SetReadOnly(bool read_only);
  // Reads of files whose path contains `path_part` return byte `file_offset` with bit 0
  // flipped. An empty `path_part` turns this off.
  void SetReadBitFlip(std::string path_part, uint64_t file_offset);
  void SetNowMillis(std::optional<uint64_t> now);
  // Clears every injected fault and the crash (the tracking of unsynced data stays).
  void ResetFaults();

  // Simulates a power cut (see above). REQUIRES: no file of this Env is still open for write.
  Status DropUnsyncedData();

  // --- Env ------------------------------------------------------------------------------
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  Result<uint64_t> FileSize(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  Status CreateDir(const std::string& dir) override;
  Status RemoveDir(const std::string& dir) override;
  Status RemoveFile(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                             const std::string& holder_name) override;
  uint64_t NowUnixMillis() override;

 private:
  friend class FaultWritableFile;
  friend class FaultRandomAccessFile;

  // What a power cut would undo for one path.
  struct FileState {
    int64_t synced_size = -1;  // -1: all of the data is durable
    bool entry_durable = true;  // the directory entry survives a power cut
    std::optional<std::string> renamed_from;  // a durable name the file had before a rename
    std::optional<std::vector<uint8_t>> replaced;  // content of the file a rename replaced
  };

  // Checks crash / read-only / k-th-op faults for `op` on `path`. REQUIRES: mu_ held.
  Status Admit(Op op, const std::string& path) PREFIXD_REQUIRES(mu_);
  Status AppendLocked(const std::string& path, WritableFile* base,
                      std::span<const uint8_t> data) PREFIXD_REQUIRES(mu_);
  Status SyncLocked(const std::string& path, WritableFile* base) PREFIXD_REQUIRES(mu_);
  Status CloseLocked(const std::string& path, WritableFile* base) PREFIXD_REQUIRES(mu_);
  void MaybeFlip(const std::string& path, uint64_t offset, size_t n, uint8_t* dst)
      PREFIXD_REQUIRES(mu_);
  Status TruncateTo(const std::string& path, uint64_t size);

  Env* const base_;
  mutable Mutex mu_;
  std::map<std::string, FileState> files_ PREFIXD_GUARDED_BY(mu_);
  // paths in files_ whose entry_durable is false
  std::set<std::string> undurable_ PREFIXD_GUARDED_BY(mu_);
  int64_t ops_ PREFIXD_GUARDED_BY(mu_) = 0;
  int64_t crash_at_ PREFIXD_GUARDED_BY(mu_) = -1;
  bool crashed_ PREFIXD_GUARDED_BY(mu_) = false;
  bool read_only_ PREFIXD_GUARDED_BY(mu_) = false;
  int64_t space_left_ PREFIXD_GUARDED_BY(mu_) = -1;
  struct NthFault {
    int64_t remaining;
    Status status;
  };
  std::vector<std::optional<NthFault>> nth_faults_ PREFIXD_GUARDED_BY(mu_);
  std::string flip_path_ PREFIXD_GUARDED_BY(mu_);
  uint64_t flip_offset_ PREFIXD_GUARDED_BY(mu_) = 0;
  std::optional<uint64_t> now_ PREFIXD_GUARDED_BY(mu_);
};

}  // namespace prefixd
