#include "store/sealing_key.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace prefixd::store {

namespace fs = std::filesystem;

namespace {

const char kHowToMake[] =
    "make one outside the cache dir with `head -c 32 /dev/urandom > FILE && chmod 600 FILE`";

bool IsHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int HexValue(char c) {
  if (c <= '9') return c - '0';
  return (c | 0x20) - 'a' + 10;
}

std::string_view TrimSpace(std::string_view s) {
  const char* space = " \t\r\n";
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(space) + 1 - begin);
}

bool IsHex(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsHexDigit); }

Result<std::string> DecodeHex(std::string_view hex, const std::string& what) {
  if (hex.size() % 2 != 0 || hex.size() < 2 * kMinSealingKeyBytes) {
    return Status::InvalidArgument(what + " holds " + std::to_string(hex.size()) +
                                   " hex digits; a key is an even number of at least " +
                                   std::to_string(2 * kMinSealingKeyBytes) + " (" +
                                   std::to_string(kMinSealingKeyBytes) + " random bytes)");
  }
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = char(HexValue(hex[2 * i]) << 4 | HexValue(hex[2 * i + 1]));
  }
  return out;
}

// `p` made absolute, "." and ".." removed, without a trailing '/'.
fs::path Lexical(const fs::path& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) abs = p;
  abs = abs.lexically_normal();
  if (!abs.has_filename() && abs.has_parent_path() && abs != abs.root_path()) {
    abs = abs.parent_path();
  }
  return abs;
}

// `p` with every symlink resolved as far as it exists, ".." after a symlink taken from its
// target (as the kernel does); the rest lexically.
fs::path Resolved(const fs::path& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) return Lexical(p);
  fs::path r = fs::weakly_canonical(abs, ec);
  return ec ? Lexical(p) : Lexical(r);
}

bool Within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

// The checks a key file passes before it is read: a regular file, outside the cache dir,
// the owner's alone.
Status CheckKeyFile(const std::string& path, const std::string& what, const std::string& cache_dir) {
  if (!cache_dir.empty() && PathIsInside(path, cache_dir)) {
    return Status::InvalidArgument(
        what + " lies inside the cache dir " + cache_dir +
        ", where whoever copies the records copies their key too: keep it elsewhere (" +
        kHowToMake + ")");
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string why = what + ": " + std::strerror(err);
    if (err == ENOENT) return Status::NotFound(why + " (" + kHowToMake + ")");
    return Status::IOError(why);
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(what + " is not a regular file");
  if ((st.st_mode & 0066) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return Status::InvalidArgument(what + " has mode " + mode +
                                   ": group or others may read or write it; `chmod 600 " + path +
                                   "` (or 400)");
  }
  if (size_t(st.st_size) > kMaxSealingKeyFileBytes) {
    return Status::InvalidArgument(what + " holds " + std::to_string(st.st_size) +
                                   " bytes, more than a key file's " +
                                   std::to_string(kMaxSealingKeyFileBytes) + ": is it the right file?");
  }
  return Status::OK();
}

Result<std::string> MaterialFromFile(Env* env, const std::string& path, const std::string& what,
                                     const std::string& cache_dir) {
  PREFIXD_RETURN_IF_ERROR(CheckKeyFile(path, what, cache_dir));
  auto bytes = env->ReadFile(path);
  if (!bytes.ok()) return bytes.status().WithContext(what);
  return ParseSealingKeyMaterial(
      std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), what);
}

std::string EnvOr(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

Result<SealingKey> Derive(Result<std::string> material, std::string source) {
  if (!material.ok()) return material.status();
  PREFIXD_ASSIGN_OR_RETURN(AeadKey key, HkdfAeadKey(*material, "", kSealingKeyInfo));
  return SealingKey{key, std::move(source)};
}

}  // namespace

SealingKeySources SealingKeySourcesFromEnvironment(std::string key_file) {
  SealingKeySources s;
  s.key_file = std::move(key_file);
  s.env_key_file = EnvOr("PREFIXD_CACHE_KEY_FILE");
  s.env_key_hex = EnvOr("PREFIXD_CACHE_KEY");
  s.credentials_dir = EnvOr("CREDENTIALS_DIRECTORY");
  return s;
}

Result<std::string> ParseSealingKeyMaterial(std::string_view bytes, const std::string& what) {
  std::string material;
  if (const std::string_view text = TrimSpace(bytes); IsHex(text)) {
    PREFIXD_ASSIGN_OR_RETURN(material, DecodeHex(text, what));
  } else if (bytes.size() < kMinSealingKeyBytes) {
    return Status::InvalidArgument(what + " holds " + std::to_string(bytes.size()) +
                                   " bytes; a key is at least " +
                                   std::to_string(kMinSealingKeyBytes) + " random bytes or " +
                                   std::to_string(2 * kMinSealingKeyBytes) + " hex digits");
  } else {
    material.assign(bytes);
  }
  if (std::all_of(material.begin(), material.end(), [&](char c) { return c == material[0]; })) {
    return Status::InvalidArgument(what + " is one byte repeated, not a random key");
  }
  return material;
}

bool PathIsInside(const std::string& path, const std::string& dir) {
  const fs::path paths[] = {Lexical(path), Resolved(path)};
  const fs::path dirs[] = {Lexical(dir), Resolved(dir)};
  for (const fs::path& p : paths) {
    for (const fs::path& d : dirs) {
      if (Within(p, d)) return true;
    }
  }
  return false;
}

Result<SealingKey> LoadSealingKey(Env* env, const SealingKeySources& s,
                                  const std::string& cache_dir) {
  if (!s.key_file.empty()) {
    const std::string what = "--cache-key-file " + s.key_file;
    return Derive(MaterialFromFile(env, s.key_file, what, cache_dir), what);
  }
  if (!s.env_key_file.empty()) {
    const std::string what = "PREFIXD_CACHE_KEY_FILE " + s.env_key_file;
    return Derive(MaterialFromFile(env, s.env_key_file, what, cache_dir), what);
  }
  if (!s.env_key_hex.empty()) {
    const std::string what = "PREFIXD_CACHE_KEY";
    const std::string_view hex = TrimSpace(s.env_key_hex);
    if (!IsHex(hex)) return Status::InvalidArgument(what + " is not hex digits");
    return Derive(ParseSealingKeyMaterial(hex, what), what);
  }
  if (!s.credentials_dir.empty()) {
    const std::string path = JoinPath(s.credentials_dir, std::string(kSealingKeyCredential));
    if (env->FileExists(path)) {
      const std::string what = "the systemd credential " + path;
      return Derive(MaterialFromFile(env, path, what, cache_dir), what);
    }
  }
  return Status::InvalidArgument(
      "--encrypt-cache needs a key kept outside the cache dir: give --cache-key-file FILE, "
      "PREFIXD_CACHE_KEY_FILE=FILE, PREFIXD_CACHE_KEY=<64+ hex digits>, or a systemd credential "
      "named prefixd-cache-key (LoadCredential=prefixd-cache-key:FILE); " +
      std::string(kHowToMake));
}

}  // namespace prefixd::store
