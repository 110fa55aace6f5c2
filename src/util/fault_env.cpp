#include "util/fault_env.h"

#include <algorithm>

namespace prefixd {

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}
  ~FaultWritableFile() override {
    if (base_) Close();
  }

  Status Append(std::span<const uint8_t> data) override {
    MutexLock lock(&env_->mu_);
    return env_->AppendLocked(path_, base_.get(), data);
  }
  Status Sync() override {
    MutexLock lock(&env_->mu_);
    return env_->SyncLocked(path_, base_.get());
  }
  Status Close() override {
    MutexLock lock(&env_->mu_);
    Status st = env_->CloseLocked(path_, base_.get());
    if (st.ok() || env_->crashed_) base_.reset();  // a dead process's descriptors are closed too
    return st;
  }

 private:
  FaultEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

class FaultRandomAccessFile : public RandomAccessFile {
 public:
  FaultRandomAccessFile(FaultEnv* env, std::string path, std::unique_ptr<RandomAccessFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    MutexLock lock(&env_->mu_);
    PREFIXD_RETURN_IF_ERROR(env_->Admit(FaultEnv::Op::kRead, path_));
    PREFIXD_ASSIGN_OR_RETURN(size_t got, base_->Read(offset, n, dst));
    env_->MaybeFlip(path_, offset, got, dst);
    return got;
  }

 private:
  FaultEnv* env_;
  std::string path_;
  std::unique_ptr<RandomAccessFile> base_;
};

FaultEnv::FaultEnv(Env* base)
    : base_(base), nth_faults_(static_cast<size_t>(Op::kNumOps)) {}

FaultEnv::~FaultEnv() = default;

void FaultEnv::CrashAfterOps(int64_t n) {
  MutexLock lock(&mu_);
  crash_at_ = ops_ + n;
}

bool FaultEnv::crashed() const {
  MutexLock lock(&mu_);
  return crashed_;
}

void FaultEnv::FailNthOp(Op op, int64_t k, Status status) {
  MutexLock lock(&mu_);
  nth_faults_[static_cast<size_t>(op)] = NthFault{k, std::move(status)};
}

void FaultEnv::SetNoSpaceAfterBytes(int64_t bytes) {
  MutexLock lock(&mu_);
  space_left_ = bytes;
}

void FaultEnv::SetReadOnly(bool read_only) {
  MutexLock lock(&mu_);
  read_only_ = read_only;
}

void FaultEnv::SetReadBitFlip(std::string path_part, uint64_t file_offset) {
  MutexLock lock(&mu_);
  flip_path_ = std::move(path_part);
  flip_offset_ = file_offset;
}

void FaultEnv::SetNowMillis(std::optional<uint64_t> now) {
  MutexLock lock(&mu_);
  now_ = now;
}

void FaultEnv::ResetFaults() {
  MutexLock lock(&mu_);
  crash_at_ = -1;
  crashed_ = false;
  read_only_ = false;
  space_left_ = -1;
  for (auto& f : nth_faults_) f.reset();
  flip_path_.clear();
}

Status FaultEnv::Admit(Op op, const std::string& path) {
  if (crashed_) return Status::IOError("injected crash: process is dead (" + path + ")");
  if (op != Op::kRead) {
    if (crash_at_ >= 0 && ops_ >= crash_at_) {
      crashed_ = true;
      return Status::IOError("injected crash before op on " + path);
    }
    if (read_only_) return Status::IOError(path + ": Read-only file system");
  }
  auto& nth = nth_faults_[static_cast<size_t>(op)];
  if (nth && --nth->remaining == 0) {
    Status st = nth->status.WithContext(path);
    nth.reset();
    return st;
  }
  if (op != Op::kRead) ++ops_;
  return Status::OK();
}

Status FaultEnv::AppendLocked(const std::string& path, WritableFile* base,
                              std::span<const uint8_t> data) {
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kAppend, path));
  if (space_left_ >= 0 && static_cast<int64_t>(data.size()) > space_left_) {
    size_t fits = static_cast<size_t>(space_left_);
    space_left_ = 0;
    PREFIXD_RETURN_IF_ERROR(base->Append(data.first(fits)));
    return Status::ResourceExhausted("write " + path + ": No space left on device");
  }
  if (space_left_ >= 0) space_left_ -= static_cast<int64_t>(data.size());
  return base->Append(data);
}

Status FaultEnv::SyncLocked(const std::string& path, WritableFile* /*base*/) {
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kSync, path));
  PREFIXD_ASSIGN_OR_RETURN(uint64_t size, base_->FileSize(path));
  auto it = files_.find(path);
  if (it != files_.end()) it->second.synced_size = static_cast<int64_t>(size);
  return Status::OK();
}

Status FaultEnv::CloseLocked(const std::string& path, WritableFile* base) {
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kClose, path));
  PREFIXD_RETURN_IF_ERROR(base->Close());
  auto it = files_.find(path);
  if (it != files_.end() && it->second.synced_size >= 0) {
    auto size = base_->FileSize(path);
    if (size.ok() && static_cast<int64_t>(*size) == it->second.synced_size) {
      it->second.synced_size = -1;  // closed with everything synced
      if (it->second.entry_durable) files_.erase(it);
    }
  }
  return Status::OK();
}

void FaultEnv::MaybeFlip(const std::string& path, uint64_t offset, size_t n, uint8_t* dst) {
  if (flip_path_.empty() || path.find(flip_path_) == std::string::npos) return;
  if (flip_offset_ >= offset && flip_offset_ < offset + n) dst[flip_offset_ - offset] ^= 1;
}

Result<std::unique_ptr<WritableFile>> FaultEnv::NewWritableFile(const std::string& path) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kOpenWrite, path));
  bool existed = base_->FileExists(path);
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
  FileState& st = files_[path];
  st.synced_size = 0;
  st.entry_durable = existed && st.entry_durable;
  if (!st.entry_durable) undurable_.insert(path);
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, path, std::move(file)));
}

Result<std::unique_ptr<WritableFile>> FaultEnv::NewAppendableFile(const std::string& path) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kOpenWrite, path));
  bool existed = base_->FileExists(path);
  int64_t size = 0;
  if (existed) {
    PREFIXD_ASSIGN_OR_RETURN(uint64_t s, base_->FileSize(path));
    size = static_cast<int64_t>(s);
  }
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewAppendableFile(path));
  auto [it, inserted] = files_.try_emplace(path);
  if (inserted) {
    it->second.entry_durable = existed;
    it->second.synced_size = size;
    if (!existed) undurable_.insert(path);
  } else if (it->second.synced_size < 0) {
    it->second.synced_size = size;
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, path, std::move(file)));
}

Result<std::unique_ptr<RandomAccessFile>> FaultEnv::NewRandomAccessFile(const std::string& path) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kRead, path));
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                           base_->NewRandomAccessFile(path));
  return std::unique_ptr<RandomAccessFile>(new FaultRandomAccessFile(this, path, std::move(file)));
}

bool FaultEnv::FileExists(const std::string& path) { return base_->FileExists(path); }

Result<uint64_t> FaultEnv::FileSize(const std::string& path) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kRead, path));
  return base_->FileSize(path);
}

Result<std::vector<std::string>> FaultEnv::ListDir(const std::string& dir) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kRead, dir));
  return base_->ListDir(dir);
}

Status FaultEnv::CreateDir(const std::string& dir) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kCreateDir, dir));
  return base_->CreateDir(dir);
}

Status FaultEnv::RemoveDir(const std::string& dir) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kRemove, dir));
  return base_->RemoveDir(dir);
}

Status FaultEnv::RemoveFile(const std::string& path) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kRemove, path));
  PREFIXD_RETURN_IF_ERROR(base_->RemoveFile(path));
  files_.erase(path);
  undurable_.erase(path);
  return Status::OK();
}

Status FaultEnv::Rename(const std::string& from, const std::string& to) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kRename, from));
  std::optional<std::vector<uint8_t>> replaced;
  auto old_to = files_.find(to);
  bool to_durable = base_->FileExists(to) && (old_to == files_.end() || old_to->second.entry_durable);
  if (to_durable) {
    PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> content, base_->ReadFile(to));
    if (old_to != files_.end() && old_to->second.synced_size >= 0) {
      content.resize(std::min<size_t>(content.size(), old_to->second.synced_size));
    }
    replaced = std::move(content);
  }
  PREFIXD_RETURN_IF_ERROR(base_->Rename(from, to));
  FileState src;
  if (auto it = files_.find(from); it != files_.end()) {
    src = it->second;
    files_.erase(it);
  }
  FileState dst;
  dst.synced_size = src.synced_size;
  dst.entry_durable = false;
  if (src.entry_durable) dst.renamed_from = from;
  else if (src.renamed_from) dst.renamed_from = src.renamed_from;
  dst.replaced = std::move(replaced);
  files_[to] = std::move(dst);
  undurable_.erase(from);
  undurable_.insert(to);
  return Status::OK();
}

Status FaultEnv::SyncDir(const std::string& dir) {
  MutexLock lock(&mu_);
  PREFIXD_RETURN_IF_ERROR(Admit(Op::kSyncDir, dir));
  for (auto u = undurable_.begin(); u != undurable_.end();) {
    if (DirName(*u) != dir) {
      ++u;
      continue;
    }
    auto it = files_.find(*u);
    if (it != files_.end()) {
      it->second.entry_durable = true;
      it->second.renamed_from.reset();
      it->second.replaced.reset();
      if (it->second.synced_size < 0) files_.erase(it);
    }
    u = undurable_.erase(u);
  }
  return Status::OK();
}

Result<std::unique_ptr<FileLock>> FaultEnv::LockFile(const std::string& path,
                                                     const std::string& holder_name) {
  return base_->LockFile(path, holder_name);
}

uint64_t FaultEnv::NowUnixMillis() {
  MutexLock lock(&mu_);
  return now_ ? *now_ : base_->NowUnixMillis();
}

Status FaultEnv::TruncateTo(const std::string& path, uint64_t size) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> content, base_->ReadFile(path));
  if (content.size() <= size) return Status::OK();
  content.resize(size);
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
  PREFIXD_RETURN_IF_ERROR(file->Append(content));
  return file->Close();
}

Status FaultEnv::DropUnsyncedData() {
  MutexLock lock(&mu_);
  Status first_error;
  auto note = [&](Status st) {
    if (!st.ok() && !st.IsNotFound() && first_error.ok()) first_error = st;
  };
  for (auto& [path, st] : files_) {
    std::string survivor = path;
    if (!st.entry_durable) {
      if (st.renamed_from) {
        note(base_->Rename(path, *st.renamed_from));
        survivor = *st.renamed_from;
      } else {
        note(base_->RemoveFile(path));
        survivor.clear();
      }
      if (st.replaced) {
        auto file = base_->NewWritableFile(path);
        if (file.ok()) {
          note((*file)->Append(*st.replaced));
          note((*file)->Close());
        } else {
          note(file.status());
        }
      }
    }
    if (!survivor.empty() && st.synced_size >= 0) {
      note(TruncateTo(survivor, static_cast<uint64_t>(st.synced_size)));
    }
  }
  files_.clear();
  undurable_.clear();
  return first_error;
}

}  // namespace prefixd
