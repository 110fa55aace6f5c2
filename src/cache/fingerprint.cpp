#include "cache/fingerprint.h"
#include "util/env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace prefixd::cache {
namespace {

constexpr char kHeader[] = "prefixd-fingerprints\t1";

Status Errno(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

std::string CrcHex(const std::string& text) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", Crc32cMask(Crc32c(text.data(), text.size())));
  return buf;
}

bool ParseHexDigest(const std::string& hex, Digest* out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    (*out)[i] = static_cast<uint8_t>(v);
  }
  return DigestHex(*out) == hex;  // rejects upper case and stray characters
}

std::string FormatRecord(const FileIdentity& id, const Digest& d) {
  std::ostringstream os;
  os << id.dev << '\t' << id.ino << '\t' << id.size << '\t' << id.mtime_ns << '\t' << DigestHex(d);
  std::string text = os.str();
  return text + '\t' + CrcHex(text);
}

bool ParseRecord(const std::string& line, FileIdentity* id, Digest* d) {
  size_t cut = line.rfind('\t');
  if (cut == std::string::npos || line.substr(cut + 1) != CrcHex(line.substr(0, cut))) {
    return false;
  }
  std::istringstream is(line.substr(0, cut));
  std::string hex;
  if (!(is >> id->dev >> id->ino >> id->size >> id->mtime_ns >> hex)) return false;
  return ParseHexDigest(hex, d);
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write", path);
    off += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status SyncDir(const std::string& file_path) {
  size_t slash = file_path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : file_path.substr(0, slash + 1);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("open dir", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::OK() : Errno("fsync dir", dir);
}

}  // namespace

Result<FileIdentity> StatFileIdentity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno("stat", path);
  FileIdentity id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

Result<Digest> HashFileContent(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  Sha256 h;
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = Errno("read", path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    h.Update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.Finish();
}

Status FingerprintMemo::Load() {
  MutexLock lock(&mu_);
  loaded_ = true;
  std::ifstream in(path_);
  if (!in) return Status::OK();  // no memo yet
  std::string line;
  if (!std::getline(in, line) || line != kHeader) {
    ++dropped_lines_;  // unknown format: start over
    return Status::OK();
  }
  while (std::getline(in, line)) {
    FileIdentity id;
    Digest d;
    if (ParseRecord(line, &id, &d)) {
      digests_[id] = d;
    } else {
      ++dropped_lines_;
    }
  }
  return Status::OK();
}

Status FingerprintMemo::Save() const {
  std::string data = std::string(kHeader) + '\n';
  {
    MutexLock lock(&mu_);
    for (const auto& [id, d] : digests_) data += FormatRecord(id, d) + '\n';
  }
  std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kPrivateFileMode);
  if (fd < 0) return Errno("open", tmp);
  Status st = WriteAll(fd, data, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = Errno("fsync", tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path_.c_str()) != 0) st = Errno("rename", tmp);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return SyncDir(path_);
}

std::optional<Digest> FingerprintMemo::Get(const FileIdentity& id) const {
  MutexLock lock(&mu_);
  auto it = digests_.find(id);
  if (it == digests_.end()) return std::nullopt;
  return it->second;
}

void FingerprintMemo::Put(const FileIdentity& id, const Digest& digest) {
  MutexLock lock(&mu_);
  digests_[id] = digest;
}

bool FingerprintMemo::loaded() const {
  MutexLock lock(&mu_);
  return loaded_;
}

size_t FingerprintMemo::size() const {
  MutexLock lock(&mu_);
  return digests_.size();
}

size_t FingerprintMemo::dropped_lines() const {
  MutexLock lock(&mu_);
  return dropped_lines_;
}

Result<Digest> FileFingerprint(const std::string& path, FingerprintMemo& memo) {
  if (!memo.loaded()) PREFIXD_RETURN_IF_ERROR(memo.Load());
  PREFIXD_ASSIGN_OR_RETURN(FileIdentity before, StatFileIdentity(path));
  if (std::optional<Digest> d = memo.Get(before)) return *d;
  PREFIXD_ASSIGN_OR_RETURN(Digest digest, HashFileContent(path));
  PREFIXD_ASSIGN_OR_RETURN(FileIdentity after, StatFileIdentity(path));
  if (!(after == before)) return Status::IOError("file changed while hashing: " + path);
  memo.Put(before, digest);
  (void)memo.Save();  // best effort: a memo that is not saved only costs a re-hash
  return digest;
}

}  // namespace prefixd::cache
