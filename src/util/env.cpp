#include "util/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace prefixd {

namespace {

Status PosixError(const std::string& context, int err) {
  std::string msg = context + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(msg);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  return Status::IOError(msg);
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::span<const uint8_t> data) override {
    const uint8_t* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("write " + path_, errno);
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return Status::OK();
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return PosixError("fdatasync " + path_, errno);
    return Status::OK();
  }

  Status Close() override {
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) return PosixError("close " + path_, errno);
    return Status::OK();
  }

 private:
  std::string path_;
  int fd_;
};

// A file written with O_DIRECT through an aligned staging buffer: whole blocks go from the
// buffer to the device, never through the page cache. The last partial block is written
// zero-padded and the file cut back to its length (Flush); it stays staged, so a later Append
// continues it and the next Flush writes it again. A file system that accepts O_DIRECT at open
// but refuses the write (EINVAL) gets the rest of the file written through the page cache.
class PosixDirectWritableFile : public WritableFile {
 public:
  static constexpr size_t kAlign = 4096;           // a multiple of any logical block size
  static constexpr size_t kStaging = size_t(1) << 20;

  PosixDirectWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd),
        buf_(static_cast<uint8_t*>(std::aligned_alloc(kAlign, kStaging)), &std::free) {}
  ~PosixDirectWritableFile() override {
    if (fd_ >= 0) Close();
  }

  Status Append(std::span<const uint8_t> data) override {
    if (!buf_) return Status::ResourceExhausted("no staging buffer for " + path_);
    while (!data.empty()) {
      const size_t n = std::min(kStaging - used_, data.size());
      std::memcpy(buf_.get() + used_, data.data(), n);
      used_ += n;
      tail_written_ = false;
      data = data.subspan(n);
      if (used_ == kStaging) PREFIXD_RETURN_IF_ERROR(Flush());
    }
    return Status::OK();
  }

  Status Sync() override {
    PREFIXD_RETURN_IF_ERROR(Flush());
    if (::fdatasync(fd_) != 0) return PosixError("fdatasync " + path_, errno);
    return Status::OK();
  }

  Status Close() override {
    Status st = fd_ >= 0 ? Flush() : Status::OK();
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0 && st.ok()) st = PosixError("close " + path_, errno);
    return st;
  }

 private:
  // Writes what is staged at flushed_ and keeps only its last partial block staged (written
  // again only once an Append changed it: Close after Sync writes nothing).
  Status Flush() {
    if (used_ == 0 || tail_written_) return Status::OK();
    const size_t padded = direct_ ? (used_ + kAlign - 1) / kAlign * kAlign : used_;
    std::memset(buf_.get() + used_, 0, padded - used_);
    Status st = WriteAt(padded);
    if (!st.ok()) return st;
    const size_t whole = direct_ ? used_ / kAlign * kAlign : used_;
    if (padded != used_ && ::ftruncate(fd_, off_t(flushed_ + used_)) != 0) {
      return PosixError("ftruncate " + path_, errno);
    }
    std::memmove(buf_.get(), buf_.get() + whole, used_ - whole);
    flushed_ += whole;
    used_ -= whole;
    tail_written_ = used_ > 0;
    return Status::OK();
  }

  Status WriteAt(size_t n) {
    size_t done = 0;
    while (done < n) {
      ssize_t w = ::pwrite(fd_, buf_.get() + done, n - done, off_t(flushed_ + done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EINVAL && direct_ && done == 0) {  // refused late: go through the cache
        if (::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) != 0) {
          return PosixError("fcntl " + path_, errno);
        }
        direct_ = false;
        n = used_;
        continue;
      }
      if (w < 0) return PosixError("write " + path_, errno);
      done += size_t(w);
    }
    return Status::OK();
  }

  std::string path_;
  int fd_;
  std::unique_ptr<uint8_t, decltype(&std::free)> buf_;
  size_t used_ = 0;     // bytes staged, from flushed_
  uint64_t flushed_ = 0;  // bytes written for good (whole blocks while direct_)
  bool direct_ = true;
  bool tail_written_ = false;  // the staged partial block is on disk as it is
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Result<size_t> Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError("read " + path_, errno);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  void Preload(uint64_t offset, uint64_t n) const override {
    if (n == 0) return;
    const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
    const uint64_t begin = offset & ~(page - 1);
    const size_t len = size_t(offset + n - begin);
    void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd_, off_t(begin));
    if (p == MAP_FAILED) {
      ::posix_fadvise(fd_, off_t(offset), off_t(n), POSIX_FADV_WILLNEED);
      return;
    }
    std::vector<unsigned char> resident((len + page - 1) / page);
    const bool all = ::mincore(p, len, resident.data()) == 0 &&
                     std::all_of(resident.begin(), resident.end(), [](unsigned char c) { return c & 1; });
    bool populated = all;
#ifdef MADV_POPULATE_READ
    // Reads what is missing; a failed read is an error here (EFAULT/EIO), not a SIGBUS.
    if (!populated) populated = ::madvise(p, len, MADV_POPULATE_READ) == 0;
#endif
    if (!populated) ::posix_fadvise(fd_, off_t(offset), off_t(n), POSIX_FADV_WILLNEED);
    ::munmap(p, len);
  }

 private:
  std::string path_;
  int fd_;
};

class PosixFileLock : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // closing the descriptor drops the flock

 private:
  int fd_;
};

std::string ReadHolderPid(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "?";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "?" : s;
}

class PosixEnv : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return OpenForWrite(path, O_TRUNC);
  }
  Result<std::unique_ptr<WritableFile>> NewUncachedWritableFile(const std::string& path) override {
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_TRUNC;
    int fd = ::open(path.c_str(), flags | O_DIRECT, kPrivateFileMode);
    if (fd < 0 && errno == EINVAL) return OpenForWrite(path, O_TRUNC);  // tmpfs and the like
    if (fd < 0) return PosixError("open " + path, errno);
    return std::unique_ptr<WritableFile>(new PosixDirectWritableFile(path, fd));
  }
  Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    return OpenForWrite(path, O_APPEND);
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + path, errno);
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd));
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError("stat " + path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PosixError("opendir " + dir, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      names.emplace_back(e->d_name);
    }
    ::closedir(d);
    return names;
  }

  Status CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), kPrivateDirMode) == 0 || errno == EEXIST) return Status::OK();
    return PosixError("mkdir " + dir, errno);
  }
  Status RemoveDir(const std::string& dir) override {
    if (::rmdir(dir.c_str()) != 0) return PosixError("rmdir " + dir, errno);
    return Status::OK();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("unlink " + path, errno);
    return Status::OK();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError("rename " + from + " -> " + to, errno);
    }
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open dir " + dir, errno);
    Status st;
    if (::fsync(fd) != 0) st = PosixError("fsync dir " + dir, errno);
    ::close(fd);
    return st;
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                             const std::string& holder_name) override {
    bool writable = true;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, kPrivateFileMode);
    if (fd < 0 && (errno == EROFS || errno == EACCES)) {  // read-only dir: lock what is there
      writable = false;
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) return PosixError("open lock file " + path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      std::string pid = ReadHolderPid(fd);
      ::close(fd);
      if (err == EWOULDBLOCK) return Status::IOError(holder_name + " is in use by pid " + pid);
      return PosixError("flock " + path, err);
    }
    if (writable) {
      std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
        // The lock is held; a missing pid only makes a rival's error message less helpful.
      }
    }
    return std::unique_ptr<FileLock>(new PosixFileLock(fd));
  }

  uint64_t NowUnixMillis() override {
    using namespace std::chrono;
    return static_cast<uint64_t>(
        duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
  }

 private:
  Result<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& path, int mode) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, kPrivateFileMode);
    if (fd < 0) return PosixError("open " + path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

Result<std::vector<uint8_t>> Env::ReadFile(const std::string& path) {
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, NewRandomAccessFile(path));
  PREFIXD_ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
  std::vector<uint8_t> data(size);
  PREFIXD_ASSIGN_OR_RETURN(size_t n, file->Read(0, data.size(), data.data()));
  data.resize(n);
  return data;
}

Status Env::CreateDirs(const std::string& dir) {
  for (size_t at = dir.find('/', 1); at != std::string::npos; at = dir.find('/', at + 1)) {
    PREFIXD_RETURN_IF_ERROR(CreateDir(dir.substr(0, at)));
  }
  return CreateDir(dir);
}

Status Env::WriteFileAtomic(const std::string& path, std::span<const uint8_t> data) {
  const std::string tmp = path + ".tmp";
  Status st = [&]() -> Status {
    PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, NewWritableFile(tmp));
    PREFIXD_RETURN_IF_ERROR(file->Append(data));
    PREFIXD_RETURN_IF_ERROR(file->Sync());
    PREFIXD_RETURN_IF_ERROR(file->Close());
    PREFIXD_RETURN_IF_ERROR(Rename(tmp, path));
    return SyncDir(DirName(path));
  }();
  if (!st.ok()) RemoveFile(tmp);  // best effort; a leftover .tmp is cleaned up by its owner
  return st;
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

}  // namespace prefixd
