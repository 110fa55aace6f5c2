// The key sealed records are kept under (store/sealed_store.h, `serve --encrypt-cache`), taken
// from where the records are not: a key kept beside what it seals protects nothing from whoever
// copies both.
//
// Key material comes from the first of these that is given (docs/security.md, "Records at
// rest"):
//   1. --cache-key-file PATH
//   2. $PREFIXD_CACHE_KEY_FILE (a path)
//   3. $PREFIXD_CACHE_KEY (the material as hex)
//   4. $CREDENTIALS_DIRECTORY/prefixd-cache-key (systemd's LoadCredential=), when that file exists
// A key file holds either 32 or more raw bytes (`head -c 32 /dev/urandom`) or, as text, 64 or
// more hex digits (an even number; surrounding white space is ignored). It is refused when it
// lies inside the cache directory (by its path as given or with every symlink resolved, against
// the directory's either way), when group or others may read or write it, when it is not a
// regular file, or when its material is short, longer than 4 KiB, or one byte repeated.
//
// The records' key is HKDF-SHA256(material, no salt, info kSealingKeyInfo): the "v2" in it
// means records sealed under the earlier scheme (HMAC of the cache dir's server-secret) never
// verify, so they are dropped as any record under another key is.
//
// Thread-safety: the functions read the environment and files and keep no state.
#pragma once

#include <string>
#include <string_view>

#include "util/aead.h"
#include "util/env.h"
#include "util/status.h"

namespace prefixd::store {

inline constexpr std::string_view kSealingKeyInfo = "prefixd cache records v2";
inline constexpr std::string_view kSealingKeyCredential = "prefixd-cache-key";
inline constexpr size_t kMinSealingKeyBytes = 32;
inline constexpr size_t kMaxSealingKeyFileBytes = 4096;

// Where key material may come from; an empty field is a source not given.
struct SealingKeySources {
  std::string key_file;         // --cache-key-file
  std::string env_key_file;     // $PREFIXD_CACHE_KEY_FILE
  std::string env_key_hex;      // $PREFIXD_CACHE_KEY
  std::string credentials_dir;  // $CREDENTIALS_DIRECTORY
};

// `key_file` (the flag's value) and the three environment variables of this process.
SealingKeySources SealingKeySourcesFromEnvironment(std::string key_file);

struct SealingKey {
  AeadKey key;
  std::string source;  // for the log: "--cache-key-file /etc/prefixd/cache-key", never the key
};

// The records' key from the first source given. `cache_dir` is the directory the records live
// in ("" when there is none); it need not exist yet. Errors (InvalidArgument, or NotFound for a
// named file that is missing) name the source and say what to do; no source at all is
// InvalidArgument naming every way to give one.
Result<SealingKey> LoadSealingKey(Env* env, const SealingKeySources& sources,
                                  const std::string& cache_dir);

// The key material `bytes` hold (raw, or hex as above); `what` names them in errors.
Result<std::string> ParseSealingKeyMaterial(std::string_view bytes, const std::string& what);

// Whether `path` lies inside `dir` (or is it), by the paths as given (made absolute, "." and
// ".." removed) and with every existing symlink resolved. Neither need exist.
bool PathIsInside(const std::string& path, const std::string& dir);

}  // namespace prefixd::store
