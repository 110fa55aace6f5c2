#include "store/disk_store.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "store/index_log.h"
#include "util/buffer_pool.h"
#include "util/coding.h"
#include "util/memcopy.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/process_memory.h"

namespace prefixd::store {

namespace {

constexpr char kIndexName[] = "index.log";
constexpr char kRecordsDir[] = "records";
constexpr char kLockName[] = "LOCK";
constexpr char kTempSuffix[] = ".tmp";
// What the quota charges once per store: the log's Header and LOCK (a pid and a newline).
constexpr uint64_t kFixedChargeBytes = kLogHeaderEntryBytes + 16;
constexpr size_t kMaxReportedDrops = 100;
constexpr auto kIdleWake = std::chrono::seconds(1);
// The longest a put waits while the foreground is busy (SetForegroundBusy).
constexpr auto kMaxWriteDefer = std::chrono::seconds(2);
// Snapshots of this many payload bytes or more are written around the page cache.
constexpr size_t kUncachedFrom = size_t(1) << 20;

// Whether a record is written around the page cache (Env::NewUncachedWritableFile). A large
// Snapshot (a recurrent model's state: megabytes at every capture point, a restore reads one)
// is: copying it into the page cache takes the CPU the decode threads wait for, ~2 s of kernel
// time a GiB on a VM against ~0.2 s direct. Rows stay cached: the page cache is the disk
// tier's RAM for them (a restore reads every Block of its prefix, a restart's from there).
bool Uncached(const RecordMeta& meta) {
  return meta.kind == RecordKind::kSnapshot && meta.payload_bytes >= kUncachedFrom;
}

// The memory of every store's in-memory index, for /metrics: per record its map and LRU
// nodes and its tokens (bounded by the quota: a record is at least its header on disk).
MemoryGauge& IndexGauge() {
  static MemoryGauge g("disk_index");
  return g;
}
int64_t IndexBytesOf(const RecordMeta& meta) {
  constexpr size_t kNodes = sizeof(std::pair<RecordId, IndexEntry>) + 32 + 3 * sizeof(RecordId) + 64;
  return int64_t(kNodes + meta.tokens.capacity() * sizeof(meta.tokens[0]));
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string FanoutName(const Key& key) { return DigestHex(key, 1); }

int FanoutIndex(const std::string& name) {
  if (name.size() != 2) return -1;
  int v = 0;
  for (char c : name) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Reads and verifies the front of a record file of `file_bytes` bytes.
Result<DecodedFront> ReadFront(const RandomAccessFile& file, uint64_t file_bytes) {
  std::vector<uint8_t> front(kPrefixBytes);
  PREFIXD_ASSIGN_OR_RETURN(size_t n, file.Read(0, front.size(), front.data()));
  front.resize(n);
  PREFIXD_ASSIGN_OR_RETURN(uint32_t h, DecodePrefix(front));
  front.resize(kPrefixBytes + h + 12);
  PREFIXD_ASSIGN_OR_RETURN(n, file.Read(0, front.size(), front.data()));
  front.resize(n);
  return DecodeRecordFront(front, file_bytes);
}

// The slices ReadVerifiedPayload reads through, shared by every reading thread. Not one per
// thread: the HTTP server's threads (slots + queue + 8 of them by default) live as long as the
// process, and each that ever read a record kept its slice, memory no owner counted (18 MiB by
// default, found by a soak replaying the same conversations from disk). At most kKept are kept
// between reads; a reader finding none allocates one.
class SlicePool {
 public:
  static constexpr size_t kSlice = size_t(256) << 10;
  static constexpr size_t kKept = 4;

  std::unique_ptr<uint8_t[]> Take() {
    {
      MutexLock lock(&mu_);
      if (!kept_.empty()) {
        std::unique_ptr<uint8_t[]> s = std::move(kept_.back());
        kept_.pop_back();
        return s;
      }
    }
    return std::make_unique_for_overwrite<uint8_t[]>(kSlice);
  }
  void Give(std::unique_ptr<uint8_t[]> slice) {
    MutexLock lock(&mu_);
    if (kept_.size() < kKept) kept_.push_back(std::move(slice));
  }

 private:
  Mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> kept_ PREFIXD_GUARDED_BY(mu_);
};

SlicePool& Slices() {
  static SlicePool* pool = new SlicePool;  // never destroyed: readers may outlive statics
  return *pool;
}

// A slice of SlicePool for one read, given back when it ends.
class ReadSlice {
 public:
  ReadSlice() : slice_(Slices().Take()) {}
  ~ReadSlice() { Slices().Give(std::move(slice_)); }
  ReadSlice(const ReadSlice&) = delete;
  ReadSlice& operator=(const ReadSlice&) = delete;
  uint8_t* data() { return slice_.get(); }

 private:
  std::unique_ptr<uint8_t[]> slice_;
};

// Reads a payload of `n` bytes and its 4-byte checksum trailer at `offset` into `out` (empty),
// verifying the checksum in the same pass: a slice at a time into a small buffer that stays in
// the CPU cache, checked there, then copied out. Nothing zero-fills `out` first (every pass
// over fresh memory costs as much as the read).
Status ReadVerifiedPayload(const RandomAccessFile& file, uint64_t offset, uint64_t n,
                           std::vector<uint8_t>* out) {
  constexpr size_t kSlice = SlicePool::kSlice;
  ReadSlice slice;
  uint8_t len[8];
  EncodeFixed64(len, n);
  uint32_t crc = Crc32c(len, sizeof len);
  uint8_t trailer[4];
  size_t trailer_got = 0;
  // A kept buffer's pages are already there: the slices are copied into place. Else fresh
  // memory, its pages populated at once, the slices appended.
  const bool kept = BufferPool::Shared().TakeKept(size_t(n), out);
  if (!kept) ReservePopulated(out, size_t(n));
  for (uint64_t done = 0; done < n + 4;) {
    const size_t want = size_t(std::min<uint64_t>(kSlice, n + 4 - done));
    PREFIXD_ASSIGN_OR_RETURN(size_t got, file.Read(offset + done, want, slice.data()));
    if (got != want) return Status::Corruption("truncated payload");
    const size_t body = size_t(std::min<uint64_t>(got, n > done ? n - done : 0));
    crc = Crc32cExtend(crc, slice.data(), body);
    if (kept) {
      std::memcpy(out->data() + done, slice.data(), body);
    } else {
      out->insert(out->end(), slice.data(), slice.data() + body);
    }
    for (size_t i = body; i < got; ++i) trailer[trailer_got++] = slice.data()[i];
    done += got;
  }
  if (DecodeFixed32(trailer) != Crc32cMask(crc)) {
    return Status::Corruption("payload checksum mismatch");
  }
  return Status::OK();
}

// A record file opened with its front read and verified, including that it holds record `id`.
struct OpenedFile {
  std::unique_ptr<RandomAccessFile> file;
  uint64_t size = 0;
  RecordMeta meta;
};

Result<OpenedFile> OpenVerifiedFront(Env* env, const std::string& path, const RecordId& id) {
  OpenedFile out;
  PREFIXD_ASSIGN_OR_RETURN(out.file, env->NewRandomAccessFile(path));
  PREFIXD_ASSIGN_OR_RETURN(out.size, env->FileSize(path));
  Result<DecodedFront> front_or = ReadFront(*out.file, out.size);
  if (front_or.status().code() == Status::Code::kNotSupported) {
    // The index took this file for ours: another version here is a damaged one.
    return Status::Corruption(front_or.status().message());
  }
  PREFIXD_ASSIGN_OR_RETURN(DecodedFront front, std::move(front_or));
  if (IdOf(front.meta) != id) {
    return Status::Corruption("key/kind in header do not match the file name");
  }
  out.meta = std::move(front.meta);
  return out;
}

// Reads a whole record file and verifies every check, including that it holds record `id`.
Result<Record> ReadRecordFile(Env* env, const std::string& path, const RecordId& id) {
  PREFIXD_ASSIGN_OR_RETURN(OpenedFile f, OpenVerifiedFront(env, path, id));
  Record rec;
  rec.meta = std::move(f.meta);
  const uint64_t n = rec.meta.payload_bytes;
  PREFIXD_RETURN_IF_ERROR(ReadVerifiedPayload(*f.file, f.size - n - 4, n, &rec.payload));
  return rec;
}

// Opens a record file and verifies its front and that it holds record `id`; the payload stays
// in the file (OpenedRecord), brought into the page cache now (Preload), so that the reader's
// reads of it later, on the thread that decodes every slot, do not wait on the device.
Result<OpenedRecord> OpenRecordFile(Env* env, const std::string& path, const RecordId& id) {
  PREFIXD_ASSIGN_OR_RETURN(OpenedFile f, OpenVerifiedFront(env, path, id));
  OpenedRecord rec;
  rec.meta = std::move(f.meta);
  const uint64_t n = rec.meta.payload_bytes;
  rec.payload_offset = f.size - n - 4;
  uint8_t trailer[4];
  PREFIXD_ASSIGN_OR_RETURN(size_t got, f.file->Read(f.size - 4, sizeof trailer, trailer));
  if (got != sizeof trailer) return Status::Corruption("truncated payload");
  rec.trailer = DecodeFixed32(trailer);
  f.file->Preload(rec.payload_offset, n);
  rec.file = std::move(f.file);
  return rec;
}

// Reads only the header of a record file (recovery).
Result<IndexEntry> ReadIndexEntry(Env* env, const std::string& path, const RecordId& id,
                                  uint64_t file_bytes) {
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env->NewRandomAccessFile(path));
  PREFIXD_ASSIGN_OR_RETURN(DecodedFront front, ReadFront(*file, file_bytes));
  if (IdOf(front.meta) != id) {
    return Status::Corruption("key/kind in header do not match the file name");
  }
  IndexEntry e;
  e.meta = std::move(front.meta);
  e.file_bytes = file_bytes;
  e.created_ms = front.created_ms;
  e.meta.last_access_unix_ms = front.created_ms;
  return e;
}

struct WriteJob {
  RecordMeta meta;
  std::shared_ptr<const std::vector<uint8_t>> payload;
  uint64_t ticket = 0;
  std::chrono::steady_clock::time_point queued_at;
};

// The disk store. Invariants (under mu_):
//   - every index_ entry names a record file that was durable when it was inserted;
//   - lru_ holds exactly one (last access, seq) key per index_ entry;
//   - used_ = kFixedChargeBytes + sum of QuotaBytesOf(index_ entries) + the reservation of the
//     record being written;
//   - live_log_bytes_ = the log's Header + sum of LogAddEntryBytes(index_ entries): the size of
//     a freshly compacted log. The log is compacted as soon as it holds more than
//     LogCapLocked() = Header + 2 * (live_log_bytes_ - Header), the index share used_ charges;
//   - pending_ holds the ids queued or being written; a Remove/Clear erases them (cancel);
//   - no file I/O happens with mu_ held: a dropped entry's id goes into unlinking_ under mu_,
//     its file is deleted after mu_ is released (RemoveFiles), and the writer does not publish
//     a record file over an id still in unlinking_.
class DiskStoreImpl : public DiskStore {
 public:
  DiskStoreImpl(const Options& o, Env* env, std::unique_ptr<FileLock> lock)
      : options_(o),
        env_(env),
        lock_(std::move(lock)),
        records_dir_(JoinPath(o.dir, kRecordsDir)),
        index_path_(JoinPath(o.dir, kIndexName)) {
    fanout_known_.fill(false);
  }

  ~DiskStoreImpl() override {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    FlushTouches();
    MutexLock lock(&mu_);
    for (const auto& [id, e] : index_) IndexGauge().Add(-IndexBytesOf(e.ie.meta));
  }

  Status Recover();
  void StartWriter() { writer_ = std::thread([this] { WriterLoop(); }); }

  bool PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) override;
  Result<std::vector<uint8_t>> Get(const Key& key, RecordKind kind) override {
    PREFIXD_ASSIGN_OR_RETURN(Record rec, Read(key, kind));
    return std::move(rec.payload);
  }
  Result<Record> Read(const Key& key, RecordKind kind) override;
  Result<OpenedRecord> OpenRecord(const Key& key, RecordKind kind) override;
  void ReportCorrupt(const Key& key, RecordKind kind) override;
  std::vector<RecordMeta> List(std::optional<Digest> domain) override;
  bool Contains(const Key& key, RecordKind kind) override {
    MutexLock lock(&mu_);
    return index_.count(RecordId{key, kind}) != 0;
  }
  Status Remove(const Key& key, RecordKind kind) override;
  Status Clear(std::optional<Digest> domain) override;
  void Flush() override;
  void SetForegroundBusy(bool busy) override;
  void SetRecordListener(RecordListener* listener) override;
  VerifyReport Verify() override;
  Stats GetStats() override;

 private:
  struct Entry {
    IndexEntry ie;
    uint64_t lru_seq = 0;
    uint64_t gen = 0;  // tells a re-inserted record from the one a reader saw
  };
  struct Pending {
    uint64_t ticket;
    Digest domain;
  };
  using Index = std::map<RecordId, Entry>;
  using LruKey = std::pair<uint64_t, uint64_t>;  // (last access ms, seq)

  std::string FanoutDir(const Key& key) const { return JoinPath(records_dir_, FanoutName(key)); }
  std::string RecordPath(const RecordId& id) const {
    return JoinPath(FanoutDir(id.key), RecordFileName(id));
  }

  // Index maintenance. REQUIRES: mu_ held.
  void InsertLocked(IndexEntry e) PREFIXD_REQUIRES(mu_);
  void EraseLocked(Index::iterator it) PREFIXD_REQUIRES(mu_);
  void TouchLocked(Entry& e, uint64_t now) PREFIXD_REQUIRES(mu_);
  void EvictLocked(uint64_t need, std::vector<RecordId>* evicted) PREFIXD_REQUIRES(mu_);
  // Drops the entry and adds its id to `removed` and unlinking_: the caller calls
  // RemoveFiles(*removed) once mu_ is released.
  void DeleteLocked(Index::iterator it, std::vector<RecordId>* removed) PREFIXD_REQUIRES(mu_);
  // Deletes the record files of `ids` and takes them out of unlinking_. REQUIRES: mu_ not held.
  void RemoveFiles(const std::vector<RecordId>& ids) PREFIXD_EXCLUDES(mu_);
  bool StillPendingLocked(const RecordId& id, uint64_t ticket) const PREFIXD_REQUIRES(mu_);

  // Recovery steps (Recover holds both locks).
  void ScanFanout(const std::string& sub, LogReplay* log, bool* dirty) PREFIXD_REQUIRES(mu_);
  void ScanFile(const std::string& sub, const std::string& name, LogReplay* log, bool* dirty)
      PREFIXD_REQUIRES(mu_);
  void NoteDrop(const std::string& rel, const std::string& why) PREFIXD_REQUIRES(mu_);
  void OpenLog(bool rewrite, uint64_t n_logged, uint64_t logged_bytes)
      PREFIXD_REQUIRES(log_mu_, mu_);

  // Writer thread.
  void WriterLoop();
  bool WriteNowLocked() const PREFIXD_REQUIRES(mu_);
  void WriteOne(const WriteJob& job) PREFIXD_EXCLUDES(mu_);
  Status Publish(const WriteJob& job, uint64_t created_ms, bool* cancelled) PREFIXD_EXCLUDES(mu_);
  Status WriteTemp(const WriteJob& job, uint64_t created_ms, const std::string& tmp);
  Status EnsureFanout(const Key& key);
  void FlushTouches() PREFIXD_EXCLUDES(log_mu_, mu_);
  void MaybeCompact() PREFIXD_EXCLUDES(log_mu_, mu_);
  // Rewrites the log when it outgrew LogCapLocked() or an append failed.
  void CompactIfDue() PREFIXD_REQUIRES(log_mu_) PREFIXD_EXCLUDES(mu_);
  uint64_t LogCapLocked() const PREFIXD_REQUIRES(mu_) {
    return kLogHeaderEntryBytes + 2 * (live_log_bytes_ - kLogHeaderEntryBytes);
  }
  void SetLogLocked(std::unique_ptr<IndexLog> log) PREFIXD_REQUIRES(log_mu_);

  // Index log appends (take log_mu_; never called with mu_ held).
  void LogAdd(const IndexEntry& e) PREFIXD_EXCLUDES(log_mu_, mu_);
  void LogRemoves(const std::vector<RecordId>& ids) PREFIXD_EXCLUDES(log_mu_, mu_);
  void NoteLogResult(const Status& st) PREFIXD_REQUIRES(log_mu_) PREFIXD_EXCLUDES(mu_);

  // Drops the entry `id` if it is still generation `gen`; deletes the file when `unlink`.
  void DropEntry(const RecordId& id, uint64_t gen, bool unlink) PREFIXD_EXCLUDES(mu_);
  Status BeginRead(const RecordId& id, uint64_t* gen, uint64_t* last_access);
  Status EndRead(const RecordId& id, uint64_t gen, const std::string& path, const Status& st);
  template <typename T>
  Result<T> CountedRead(const Key& key, RecordKind kind,
                        Result<T> (*read)(Env*, const std::string&, const RecordId&));

  const Options options_;
  Env* const env_;
  std::unique_ptr<FileLock> lock_;
  const std::string records_dir_;
  const std::string index_path_;
  std::array<bool, 256> fanout_known_;  // writer thread (and Recover) only

  Mutex mu_;
  CondVar work_cv_;  // the writer waits for work
  CondVar done_cv_;  // Flush waits for the writer
  CondVar unlinked_cv_;  // the writer waits for a deletion of the id it publishes
  // dropped entries whose files are not deleted yet
  std::multiset<RecordId> unlinking_ PREFIXD_GUARDED_BY(mu_);
  Index index_ PREFIXD_GUARDED_BY(mu_);
  RecordListener* listener_ PREFIXD_GUARDED_BY(mu_) = nullptr;  // SetRecordListener
  std::set<std::pair<LruKey, RecordId>> lru_ PREFIXD_GUARDED_BY(mu_);
  // last-access times not yet in the log
  std::map<RecordId, uint64_t> touched_ PREFIXD_GUARDED_BY(mu_);
  std::map<RecordId, Pending> pending_ PREFIXD_GUARDED_BY(mu_);
  std::deque<WriteJob> queue_ PREFIXD_GUARDED_BY(mu_);
  // SetForegroundBusy: defer writes (see WriteNowLocked)
  bool foreground_busy_ PREFIXD_GUARDED_BY(mu_) = false;
  int flushing_ PREFIXD_GUARDED_BY(mu_) = 0;  // Flush() calls waiting: write now
  uint64_t queued_bytes_ PREFIXD_GUARDED_BY(mu_) = 0;  // payload bytes in queue_
  uint64_t used_ PREFIXD_GUARDED_BY(mu_) = kFixedChargeBytes;
  uint64_t live_log_bytes_ PREFIXD_GUARDED_BY(mu_) = kLogHeaderEntryBytes;
  uint64_t lru_counter_ PREFIXD_GUARDED_BY(mu_) = 0;
  uint64_t gen_counter_ PREFIXD_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ PREFIXD_GUARDED_BY(mu_) = 1;
  uint64_t completed_ticket_ PREFIXD_GUARDED_BY(mu_) = 0;
  bool stop_ PREFIXD_GUARDED_BY(mu_) = false;
  Stats stats_ PREFIXD_GUARDED_BY(mu_);
  std::thread writer_;

  Mutex log_mu_ PREFIXD_ACQUIRED_BEFORE(mu_);  // lock order: log_mu_ before mu_
  std::unique_ptr<IndexLog> log_ PREFIXD_GUARDED_BY(log_mu_);
  bool log_needs_rewrite_ PREFIXD_GUARDED_BY(log_mu_) = false;
  // log_->bytes(), or the file's last known size while there is no log_ (read without locks)
  std::atomic<uint64_t> log_bytes_{0};
  std::atomic<uint64_t> log_compactions_{0};
};

// ----- index -------------------------------------------------------------------------------

void DiskStoreImpl::InsertLocked(IndexEntry e) {
  RecordId id = IdOf(e.meta);
  Entry entry;
  entry.lru_seq = ++lru_counter_;
  entry.gen = ++gen_counter_;
  lru_.insert({{e.meta.last_access_unix_ms, entry.lru_seq}, id});
  used_ += e.file_bytes + 2 * LogAddEntryBytes(e.meta);
  live_log_bytes_ += LogAddEntryBytes(e.meta);
  IndexGauge().Add(IndexBytesOf(e.meta));
  if (listener_ != nullptr) listener_->OnRecordAdded(e.meta);
  entry.ie = std::move(e);
  index_[id] = std::move(entry);
}

void DiskStoreImpl::EraseLocked(Index::iterator it) {
  const Entry& e = it->second;
  lru_.erase({{e.ie.meta.last_access_unix_ms, e.lru_seq}, it->first});
  used_ -= e.ie.file_bytes + 2 * LogAddEntryBytes(e.ie.meta);
  live_log_bytes_ -= LogAddEntryBytes(e.ie.meta);
  IndexGauge().Add(-IndexBytesOf(e.ie.meta));
  if (listener_ != nullptr) listener_->OnRecordRemoved(e.ie.meta);
  touched_.erase(it->first);
  index_.erase(it);
}

void DiskStoreImpl::SetRecordListener(RecordListener* listener) {
  MutexLock lock(&mu_);
  listener_ = listener;
  if (listener_ == nullptr) return;
  std::vector<const RecordMeta*> held;
  held.reserve(index_.size());
  for (const auto& [id, e] : index_) held.push_back(&e.ie.meta);
  std::stable_sort(held.begin(), held.end(), [](const RecordMeta* a, const RecordMeta* b) {
    return a->position < b->position;
  });
  for (const RecordMeta* m : held) listener_->OnRecordAdded(*m);
}

void DiskStoreImpl::TouchLocked(Entry& e, uint64_t now) {
  RecordId id = IdOf(e.ie.meta);
  lru_.erase({{e.ie.meta.last_access_unix_ms, e.lru_seq}, id});
  e.ie.meta.last_access_unix_ms = std::max(now, e.ie.meta.last_access_unix_ms);
  e.lru_seq = ++lru_counter_;
  lru_.insert({{e.ie.meta.last_access_unix_ms, e.lru_seq}, id});
  touched_[id] = e.ie.meta.last_access_unix_ms;
}

void DiskStoreImpl::DeleteLocked(Index::iterator it, std::vector<RecordId>* removed) {
  removed->push_back(it->first);
  unlinking_.insert(it->first);
  EraseLocked(it);
}

void DiskStoreImpl::RemoveFiles(const std::vector<RecordId>& ids) {
  if (ids.empty()) return;
  for (const RecordId& id : ids) {
    env_->RemoveFile(RecordPath(id));  // NotFound is fine; other errors: nothing better to do
  }
  {
    MutexLock lock(&mu_);
    for (const RecordId& id : ids) unlinking_.erase(unlinking_.find(id));
  }
  unlinked_cv_.notify_all();
}

void DiskStoreImpl::EvictLocked(uint64_t need, std::vector<RecordId>* evicted) {
  while (used_ + need > options_.quota_bytes && !lru_.empty()) {
    DeleteLocked(index_.find(lru_.begin()->second), evicted);
    ++stats_.evictions;
  }
}

bool DiskStoreImpl::StillPendingLocked(const RecordId& id, uint64_t ticket) const {
  auto it = pending_.find(id);
  return it != pending_.end() && it->second.ticket == ticket;
}

void DiskStoreImpl::DropEntry(const RecordId& id, uint64_t gen, bool unlink) {
  std::vector<RecordId> removed;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(id);
    if (it == index_.end() || it->second.gen != gen) return;
    if (unlink) {
      DeleteLocked(it, &removed);
    } else {
      removed.push_back(id);
      EraseLocked(it);
    }
  }
  if (unlink) RemoveFiles(removed);
  LogRemoves(removed);
}

// ----- recovery ----------------------------------------------------------------------------

void DiskStoreImpl::NoteDrop(const std::string& rel, const std::string& why) {
  RecoveryReport& r = stats_.recovery;
  if (r.dropped.size() < kMaxReportedDrops) r.dropped.push_back(rel + ": " + why);
}

void DiskStoreImpl::ScanFile(const std::string& sub, const std::string& name, LogReplay* log,
                             bool* dirty) {
  RecoveryReport& r = stats_.recovery;
  const std::string rel = std::string(kRecordsDir) + "/" + sub + "/" + name;
  const std::string path = JoinPath(JoinPath(records_dir_, sub), name);
  if (EndsWith(name, kTempSuffix)) {
    env_->RemoveFile(path);
    ++r.dropped_temp;
    NoteDrop(rel, "torn write (temp file) deleted");
    return;
  }
  std::optional<RecordId> id = ParseRecordFileName(name);
  auto size = env_->FileSize(path);
  if (!id || FanoutName(id->key) != sub || !size.ok()) {
    ++r.unknown_files;
    return;
  }
  auto logged = log->entries.find(*id);
  if (logged != log->entries.end() && logged->second.file_bytes == *size) {
    InsertLocked(std::move(logged->second));
    log->entries.erase(logged);
    return;
  }
  *dirty = true;
  auto entry = ReadIndexEntry(env_, path, *id, *size);
  if (logged != log->entries.end()) {
    if (entry.ok()) entry->meta.last_access_unix_ms = logged->second.meta.last_access_unix_ms;
    log->entries.erase(logged);
  }
  if (entry.ok()) {
    InsertLocked(std::move(*entry));
    ++r.rebuilt_from_files;
  } else if (entry.status().code() == Status::Code::kNotSupported) {
    ++r.unknown_files;  // a newer format: leave it for the binary that wrote it
  } else {
    env_->RemoveFile(path);
    ++r.dropped_bad;
    NoteDrop(rel, entry.status().message());
  }
}

void DiskStoreImpl::ScanFanout(const std::string& sub, LogReplay* log, bool* dirty) {
  int idx = FanoutIndex(sub);
  auto names = env_->ListDir(JoinPath(records_dir_, sub));
  if (idx < 0 || !names.ok()) {
    ++stats_.recovery.unknown_files;
    return;
  }
  fanout_known_[static_cast<size_t>(idx)] = true;
  for (const std::string& name : *names) ScanFile(sub, name, log, dirty);
}

Status DiskStoreImpl::Recover() {
  auto t0 = std::chrono::steady_clock::now();
  RecoveryReport& r = stats_.recovery;
  MutexLock log_lock(&log_mu_);  // not shared yet; taken for the REQUIRES of helpers
  MutexLock lock(&mu_);
  auto replay = IndexLog::Replay(env_, index_path_);
  LogReplay log;
  if (replay.ok()) {
    log = std::move(*replay);
  } else {
    log.missing = true;
    r.index_torn_reason = replay.status().ToString();
  }
  r.index_missing = log.missing || log.bad_version;
  r.index_torn_bytes = log.torn_bytes;
  if (!log.torn_reason.empty()) r.index_torn_reason = log.torn_reason;
  bool dirty = r.index_missing || log.torn_bytes > 0;

  if (!env_->FileExists(records_dir_) && env_->CreateDir(records_dir_).ok()) {
    env_->SyncDir(options_.dir);
  }
  auto subs = env_->ListDir(records_dir_);
  if (!subs.ok() && !subs.status().IsNotFound()) return subs.status().WithContext("recovery");
  if (subs.ok()) {
    for (const std::string& sub : *subs) ScanFanout(sub, &log, &dirty);
  }
  for (const auto& [id, e] : log.entries) {
    ++r.dropped_missing;
    NoteDrop(std::string(kRecordsDir) + "/" + FanoutName(id.key) + "/" + RecordFileName(id),
             "in the index but the file is gone");
    dirty = true;
  }
  std::vector<RecordId> evicted;
  EvictLocked(0, &evicted);
  r.evicted_over_quota = evicted.size();
  stats_.evictions = 0;  // evictions at open are reported in the recovery report
  dirty = dirty || !evicted.empty();
  r.records_kept = index_.size();
  OpenLog(dirty || log.bytes > LogCapLocked(), log.n_entries, log.bytes);
  r.open_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Status::OK();
}

void DiskStoreImpl::OpenLog(bool rewrite, uint64_t n_logged, uint64_t logged_bytes) {
  // Called from Recover, before any other thread runs.
  Result<std::unique_ptr<IndexLog>> log = Status::Internal("unset");
  if (rewrite) {
    std::vector<const IndexEntry*> entries;
    entries.reserve(index_.size());
    for (const auto& [key, id] : lru_) entries.push_back(&index_.at(id).ie);
    log = IndexLog::Rewrite(env_, index_path_, entries);
  } else {
    log = IndexLog::OpenForAppend(env_, index_path_, n_logged, logged_bytes);
  }
  log_bytes_ = logged_bytes;
  if (log.ok()) {
    SetLogLocked(std::move(*log));
  } else {
    ++stats_.index_write_errors;  // e.g. a read-only dir: reads still work
  }
}

// ----- writes ------------------------------------------------------------------------------

bool DiskStoreImpl::PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) {
  assert(payload != nullptr);
  RecordId id = IdOf(meta);
  {
    MutexLock lock(&mu_);
    if (stop_) return false;
    if (index_.count(id) || pending_.count(id)) {
      ++stats_.puts_deduped;
      ++stats_.puts_accepted;
      return true;
    }
    if (meta.tokens.size() > kMaxTokensPerRecord) {
      ++stats_.put_fail_too_large;
      return false;
    }
    if (queue_.size() >= options_.writer_queue_depth ||
        (!queue_.empty() && queued_bytes_ + payload->size() > options_.writer_queue_bytes)) {
      ++stats_.put_fail_queue_full;
      return false;
    }
    meta.payload_bytes = payload->size();
    uint64_t ticket = next_ticket_++;
    pending_[id] = Pending{ticket, meta.domain};
    queued_bytes_ += payload->size();
    queue_.push_back(
        WriteJob{std::move(meta), std::move(payload), ticket, std::chrono::steady_clock::now()});
    ++stats_.puts_accepted;
  }
  work_cv_.notify_one();
  return true;
}

void DiskStoreImpl::WriterLoop() {
  MutexLock lock(&mu_);
  while (true) {
    const auto wake = std::chrono::steady_clock::now() + kIdleWake;
    while (!stop_ && (queue_.empty() || !WriteNowLocked()) && work_cv_.WaitUntil(lock, wake)) {
    }
    if (!queue_.empty() && WriteNowLocked()) {
      WriteJob job = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= job.payload->size();
      lock.Unlock();
      WriteOne(job);
      lock.Lock();
      completed_ticket_ = job.ticket;
      done_cv_.notify_all();
      continue;
    }
    if (stop_) break;
    if (foreground_busy_) continue;  // index maintenance waits for an idle moment too
    lock.Unlock();
    FlushTouches();
    MaybeCompact();
    lock.Lock();
  }
}

void DiskStoreImpl::WriteOne(const WriteJob& job) {
  const RecordId id = IdOf(job.meta);
  const uint64_t need = RecordFileBytes(job.meta);
  const uint64_t charge = QuotaBytesOf(job.meta);  // the file and its share of the index log
  std::vector<RecordId> evicted;
  {
    MutexLock lock(&mu_);
    if (!StillPendingLocked(id, job.ticket)) {
      ++stats_.puts_cancelled;
      return;
    }
    if (charge + kFixedChargeBytes > options_.quota_bytes) {
      ++stats_.put_fail_too_large;
      pending_.erase(id);
      return;
    }
    EvictLocked(charge, &evicted);
    used_ += charge;  // reserved for the temp file from here on
  }
  RemoveFiles(evicted);
  LogRemoves(evicted);
  const uint64_t created_ms = env_->NowUnixMillis();
  bool cancelled = false;
  Status st = Publish(job, created_ms, &cancelled);
  IndexEntry entry;
  bool unpublish = false;
  {
    MutexLock lock(&mu_);
    used_ -= charge;
    // Removed or cleared while being published: the file goes, nothing is indexed.
    unpublish = st.ok() && !cancelled && !StillPendingLocked(id, job.ticket);
    if (StillPendingLocked(id, job.ticket)) pending_.erase(id);
    if (!st.ok()) {
      ++(st.code() == Status::Code::kResourceExhausted ? stats_.put_fail_no_space
                                                       : stats_.put_fail_io);
      return;
    }
    if (cancelled || unpublish) {
      ++stats_.puts_cancelled;
    } else {
      entry.meta = job.meta;
      entry.meta.last_access_unix_ms = created_ms;
      entry.file_bytes = need;
      entry.created_ms = created_ms;
      InsertLocked(entry);
      ++stats_.puts_written;
    }
  }
  // Only this thread publishes record files: no newer file of this id can be in place yet.
  if (unpublish) env_->RemoveFile(RecordPath(id));
  if (cancelled || unpublish) return;
  LogAdd(entry);
}

Status DiskStoreImpl::WriteTemp(const WriteJob& job, uint64_t created_ms, const std::string& tmp) {
  std::vector<uint8_t> front = EncodeRecordFront(job.meta, created_ms);
  uint32_t crc = PayloadCrc(job.payload->size(), *job.payload);
  uint8_t trailer[4];
  EncodeFixed32(trailer, crc);
  auto opened = Uncached(job.meta) ? env_->NewUncachedWritableFile(tmp) : env_->NewWritableFile(tmp);
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, std::move(opened));
  PREFIXD_RETURN_IF_ERROR(file->Append(front));
  PREFIXD_RETURN_IF_ERROR(file->Append(*job.payload));
  PREFIXD_RETURN_IF_ERROR(file->Append(std::span<const uint8_t>(trailer, 4)));
  PREFIXD_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

Status DiskStoreImpl::EnsureFanout(const Key& key) {
  uint8_t idx = key[0];
  if (fanout_known_[idx]) return Status::OK();
  PREFIXD_RETURN_IF_ERROR(env_->CreateDir(records_dir_));
  PREFIXD_RETURN_IF_ERROR(env_->CreateDir(FanoutDir(key)));
  PREFIXD_RETURN_IF_ERROR(env_->SyncDir(records_dir_));
  fanout_known_[idx] = true;
  return Status::OK();
}

// temp file, fsync, rename, dir fsync. On failure nothing is left behind (best effort).
Status DiskStoreImpl::Publish(const WriteJob& job, uint64_t created_ms, bool* cancelled) {
  const RecordId id = IdOf(job.meta);
  const std::string path = RecordPath(id);
  const std::string tmp = path + kTempSuffix;
  PREFIXD_RETURN_IF_ERROR(EnsureFanout(id.key));
  Status st = WriteTemp(job, created_ms, tmp);
  if (st.ok()) {
    MutexLock lock(&mu_);
    while (unlinking_.count(id) != 0) unlinked_cv_.Wait(lock);  // an older file's delete
    *cancelled = !StillPendingLocked(id, job.ticket);
  }
  // Cancelled from here on: WriteOne sees it and deletes the published file.
  if (st.ok() && !*cancelled) st = env_->Rename(tmp, path);
  if (!st.ok() || *cancelled) {
    env_->RemoveFile(tmp);
    return st;
  }
  st = env_->SyncDir(FanoutDir(id.key));
  if (!st.ok()) env_->RemoveFile(path);  // not known durable: never index it
  return st;
}

// ----- index log ---------------------------------------------------------------------------

void DiskStoreImpl::NoteLogResult(const Status& st) {
  if (st.ok()) return;
  log_needs_rewrite_ = true;
  MutexLock lock(&mu_);
  ++stats_.index_write_errors;
}

void DiskStoreImpl::LogAdd(const IndexEntry& e) {
  MutexLock lock(&log_mu_);
  NoteLogResult(log_ ? log_->AppendAdd(e) : Status::IOError("no index log"));
  CompactIfDue();
}

void DiskStoreImpl::LogRemoves(const std::vector<RecordId>& ids) {
  if (ids.empty()) return;
  MutexLock lock(&log_mu_);
  for (const RecordId& id : ids) {
    NoteLogResult(log_ ? log_->AppendRemove(id) : Status::IOError("no index log"));
  }
  CompactIfDue();
}

void DiskStoreImpl::FlushTouches() {
  std::map<RecordId, uint64_t> touched;
  {
    MutexLock lock(&mu_);
    touched.swap(touched_);
  }
  if (touched.empty()) return;
  MutexLock lock(&log_mu_);
  if (!log_) return;
  for (const auto& [id, ms] : touched) NoteLogResult(log_->AppendTouch(id, ms));
  CompactIfDue();
}

void DiskStoreImpl::SetLogLocked(std::unique_ptr<IndexLog> log) {
  log_ = std::move(log);
  log_bytes_ = log_->bytes();
}

void DiskStoreImpl::MaybeCompact() {
  MutexLock log_lock(&log_mu_);
  CompactIfDue();
}

void DiskStoreImpl::CompactIfDue() {
  if (log_) log_bytes_ = log_->bytes();
  if (!log_) return;
  std::vector<IndexEntry> copies;
  {
    MutexLock lock(&mu_);
    if (!log_needs_rewrite_ && log_->bytes() <= LogCapLocked()) return;
    copies.reserve(index_.size());
    for (const auto& [key, id] : lru_) copies.push_back(index_.at(id).ie);
    touched_.clear();  // the copies carry the latest access times
  }
  std::vector<const IndexEntry*> ptrs;
  ptrs.reserve(copies.size());
  for (const IndexEntry& e : copies) ptrs.push_back(&e);
  log_.reset();  // close before replacing
  auto log = IndexLog::Rewrite(env_, index_path_, ptrs);
  if (log.ok()) {
    SetLogLocked(std::move(*log));
    log_needs_rewrite_ = false;
    ++log_compactions_;
  } else {
    MutexLock lock(&mu_);
    ++stats_.index_write_errors;  // log_ stays null: the next open rebuilds from the files
  }
}

// ----- reads -------------------------------------------------------------------------------

// Looks `id` up for a read: counts the get and touches the entry.
Status DiskStoreImpl::BeginRead(const RecordId& id, uint64_t* gen, uint64_t* last_access) {
  MutexLock lock(&mu_);
  ++stats_.gets;
  auto it = index_.find(id);
  if (it == index_.end()) {
    ++stats_.get_not_found;
    return Status::NotFound("no record " + RecordFileName(id));
  }
  *gen = it->second.gen;
  TouchLocked(it->second, env_->NowUnixMillis());
  *last_access = it->second.ie.meta.last_access_unix_ms;
  return Status::OK();
}

// Counts how a read of `id` ended; a record gone behind the store's back is forgotten, a
// damaged one quarantined. Returns the status to give the caller.
Status DiskStoreImpl::EndRead(const RecordId& id, uint64_t gen, const std::string& path,
                              const Status& st) {
  if (st.ok()) {
    MutexLock lock(&mu_);
    ++stats_.get_hits;
    return st;
  }
  if (st.IsNotFound()) {
    DropEntry(id, gen, /*unlink=*/false);
    MutexLock lock(&mu_);
    ++stats_.get_not_found;
    return Status::NotFound(path + " was deleted behind the store's back");
  }
  if (st.IsCorruption()) {
    DropEntry(id, gen, /*unlink=*/true);
    MutexLock lock(&mu_);
    ++stats_.get_corrupt;
    ++stats_.quarantined;
    return Status::Corruption(path + ": " + st.message() + " (quarantined)");
  }
  MutexLock lock(&mu_);
  ++stats_.get_io_errors;
  return st;
}

// Read and OpenRecord: one of the file readers between the index lookup and the accounting.
template <typename T>
Result<T> DiskStoreImpl::CountedRead(const Key& key, RecordKind kind,
                                     Result<T> (*read)(Env*, const std::string&, const RecordId&)) {
  const RecordId id{key, kind};
  uint64_t gen = 0, last_access = 0;
  PREFIXD_RETURN_IF_ERROR(BeginRead(id, &gen, &last_access));
  const std::string path = RecordPath(id);
  Result<T> rec = read(env_, path, id);
  PREFIXD_RETURN_IF_ERROR(EndRead(id, gen, path, rec.status()));
  rec->meta.last_access_unix_ms = last_access;
  return rec;
}

Result<Record> DiskStoreImpl::Read(const Key& key, RecordKind kind) {
  return CountedRead<Record>(key, kind, &ReadRecordFile);
}

Result<OpenedRecord> DiskStoreImpl::OpenRecord(const Key& key, RecordKind kind) {
  return CountedRead<OpenedRecord>(key, kind, &OpenRecordFile);
}

void DiskStoreImpl::ReportCorrupt(const Key& key, RecordKind kind) {
  const RecordId id{key, kind};
  uint64_t gen = 0;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return;
    gen = it->second.gen;
    ++stats_.get_corrupt;
    ++stats_.quarantined;
  }
  DropEntry(id, gen, /*unlink=*/true);
  Logf(LogLevel::kWarning, "%s: payload failed its check (checksum, or a seal that does not verify): quarantined", RecordPath(id).c_str());
}

VerifyReport DiskStoreImpl::Verify() {
  std::vector<std::pair<RecordId, uint64_t>> ids;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, e] : index_) ids.emplace_back(id, e.gen);
  }
  VerifyReport report;
  for (const auto& [id, gen] : ids) {
    ++report.checked;
    Result<Record> rec = ReadRecordFile(env_, RecordPath(id), id);
    if (rec.ok()) continue;
    ++report.bad;
    report.problems.push_back(RecordFileName(id) + ": " + rec.status().ToString());
    bool corrupt = rec.status().IsCorruption();
    if (corrupt || rec.status().IsNotFound()) DropEntry(id, gen, /*unlink=*/corrupt);
    if (corrupt) {
      MutexLock lock(&mu_);
      ++stats_.quarantined;
    }
  }
  return report;
}

std::vector<RecordMeta> DiskStoreImpl::List(std::optional<Digest> domain) {
  MutexLock lock(&mu_);
  std::vector<RecordMeta> out;
  out.reserve(index_.size());
  for (const auto& [lru_key, id] : lru_) {
    const RecordMeta& m = index_.at(id).ie.meta;
    if (!domain || m.domain == *domain) out.push_back(m);
  }
  return out;
}

// ----- removal -----------------------------------------------------------------------------

Status DiskStoreImpl::Remove(const Key& key, RecordKind kind) {
  const RecordId id{key, kind};
  std::vector<RecordId> removed;
  bool found = false;
  {
    MutexLock lock(&mu_);
    found = pending_.erase(id) > 0;
    auto it = index_.find(id);
    if (it != index_.end()) {
      DeleteLocked(it, &removed);
      found = true;
    }
    if (found) ++stats_.removes;
  }
  RemoveFiles(removed);
  LogRemoves(removed);
  return found ? Status::OK() : Status::NotFound("no record " + RecordFileName(id));
}

Status DiskStoreImpl::Clear(std::optional<Digest> domain) {
  std::vector<RecordId> removed;
  {
    MutexLock lock(&mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      it = (!domain || it->second.domain == *domain) ? pending_.erase(it) : std::next(it);
    }
    for (auto it = index_.begin(); it != index_.end();) {
      auto next = std::next(it);
      if (!domain || it->second.ie.meta.domain == *domain) DeleteLocked(it, &removed);
      it = next;
    }
    stats_.removes += removed.size();
  }
  RemoveFiles(removed);
  LogRemoves(removed);
  return Status::OK();
}

void DiskStoreImpl::Flush() {
  {
    MutexLock lock(&mu_);
    uint64_t target = next_ticket_ - 1;
    ++flushing_;
    work_cv_.notify_all();
    while (completed_ticket_ < target) done_cv_.Wait(lock);
    --flushing_;
  }
  FlushTouches();
  MaybeCompact();
}

void DiskStoreImpl::SetForegroundBusy(bool busy) {
  {
    MutexLock lock(&mu_);
    foreground_busy_ = busy;
  }
  if (!busy) work_cv_.notify_all();
}

// REQUIRES: mu_ held and a put queued.
bool DiskStoreImpl::WriteNowLocked() const {
  if (!foreground_busy_ || stop_ || flushing_ > 0) return true;
  if (queue_.size() * 2 >= options_.writer_queue_depth) return true;
  if (queued_bytes_ * 2 >= options_.writer_queue_bytes) return true;
  return std::chrono::steady_clock::now() - queue_.front().queued_at >= kMaxWriteDefer;
}

Stats DiskStoreImpl::GetStats() {
  MutexLock lock(&mu_);
  Stats s = stats_;
  s.records = index_.size();
  s.bytes = 0;
  for (const auto& [id, e] : index_) {
    s.bytes += e.ie.file_bytes;
    s.records_by_kind[id.kind]++;
  }
  s.quota_bytes = options_.quota_bytes;
  s.index_bytes = log_bytes_;
  s.index_compactions = log_compactions_;
  s.queue_depth = queue_.size();
  return s;
}

}  // namespace

uint64_t QuotaBytesOf(const RecordMeta& meta) {
  return RecordFileBytes(meta) + 2 * LogAddEntryBytes(meta);
}

std::string RecoveryReport::ToString() const {
  std::string s = "kept " + std::to_string(records_kept) + " records";
  auto add = [&](uint64_t n, const char* what) {
    if (n > 0) s += "; " + std::to_string(n) + " " + what;
  };
  add(rebuilt_from_files, "rebuilt from their headers");
  add(dropped_bad, "bad records dropped");
  add(dropped_temp, "torn writes dropped");
  add(dropped_missing, "index entries without a file dropped");
  add(evicted_over_quota, "evicted over quota");
  add(unknown_files, "unknown files left alone");
  if (index_missing) s += "; index missing, rebuilt";
  if (index_torn_bytes > 0) {
    s += "; index torn (" + std::to_string(index_torn_bytes) + " bytes: " + index_torn_reason + ")";
  }
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1f", open_ms);
  return s + "; opened in " + ms + " ms";
}

Result<std::unique_ptr<DiskStore>> DiskStore::Open(const Options& options) {
  if (options.dir.empty()) return Status::InvalidArgument("DiskStore: empty cache dir");
  if (options.quota_bytes == 0) return Status::InvalidArgument("DiskStore: quota_bytes is 0");
  if (options.writer_queue_depth == 0) {
    return Status::InvalidArgument("DiskStore: writer_queue_depth is 0");
  }
  Env* env = options.env ? options.env : Env::Default();
  Status st = env->CreateDir(options.dir);
  if (!st.ok() && !env->FileExists(options.dir)) return st.WithContext("cache dir");
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<FileLock> lock,
                           env->LockFile(JoinPath(options.dir, kLockName),
                                         "cache dir " + options.dir));
  auto store = std::make_unique<DiskStoreImpl>(options, env, std::move(lock));
  PREFIXD_RETURN_IF_ERROR(store->Recover());
  store->StartWriter();
  return std::unique_ptr<DiskStore>(std::move(store));
}

}  // namespace prefixd::store
