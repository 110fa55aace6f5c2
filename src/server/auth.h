// Tenancy and rights: optional API keys, the cache salt of each tenant, and admin keys.
//
// Without key files there is one tenant, salt "", every request is let in and every route is
// open (the local default). With keys, a request must name a listed key, either as
// "Authorization: Bearer <key>" (OpenAI clients) or as "x-api-key: <key>" (Anthropic clients);
// when both headers are sent they must name the same key. Each key is its own tenant, whose salt
// is HMAC-SHA256(server secret, "prefixd tenant salt v1\n" + key) as 64 hex digits: chosen by the
// server, never by the client, so one tenant's cached prefixes can never be hit — or probed by
// timing — by another. The server secret is 32 random bytes kept in <cache dir>/server-secret
// (mode 0600), so salts, and with them the disk cache, survive restarts; without a cache dir it
// is random per process.
//
// Rights: keys from the admin key file may call the admin routes (IsAdminRoute); they are
// tenants too, with a salt of their own like any key. Keys from the API key file are tenants
// without admin rights. With keys on and no admin key file, nobody may call the admin routes.
// Without any key file everybody may (one local user).
//
// A presented key is checked by computing its HMAC digest and comparing it with every listed
// key's digest with CRYPTO_memcmp, without stopping at a match: the time taken depends neither
// on how close a wrong key was nor on which listed key matched. Raw keys are not kept.
//
// Key files: one key per line; blank lines and lines starting with '#' are skipped; surrounding
// whitespace is trimmed.
//
// Thread-safety: Authenticate() may be called from any thread; the object is immutable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "util/env.h"
#include "util/hash.h"
#include "util/status.h"

namespace prefixd::server {

struct Tenant {
  std::string salt;    // handed to the engine; never logged
  std::string label;   // short, non-secret id for logs ("-" for the single tenant)
  bool admin = false;  // may call the admin routes
};

struct AuthOptions {
  std::string key_file;        // "" -> no tenant keys
  std::string admin_key_file;  // "" -> no admin keys
  std::string secret_dir;      // "" -> a per-process server secret
};

// Why Authenticate() refused a request.
enum class AuthFailure {
  kMissingKey,    // keys are on and neither header names a key
  kUnknownKey,    // the key is not listed
  kConflicting,   // Authorization and x-api-key name different keys
};

class TenantAuth {
 public:
  static Result<std::unique_ptr<TenantAuth>> Create(Env* env, const AuthOptions& options);
  // The same with tenant keys only (no admin keys).
  static Result<std::unique_ptr<TenantAuth>> Create(Env* env, const std::string& key_file,
                                                    const std::string& secret_dir) {
    return Create(env, AuthOptions{key_file, "", secret_dir});
  }

  // True when requests must carry a key.
  bool enabled() const { return !keys_.empty(); }
  // True when some key may call the admin routes (keys on and an admin key file given).
  bool has_admin_keys() const { return has_admin_; }

  // The tenant of a request given its Authorization and x-api-key headers ("" when absent).
  // Without keys: the single tenant (admin). With keys: the listed key's tenant, or the reason
  // the request is refused.
  struct Outcome {
    std::optional<Tenant> tenant;
    AuthFailure failure = AuthFailure::kMissingKey;  // meaningful when !tenant
  };
  Outcome Check(const std::string& authorization, const std::string& x_api_key) const;
  // Check()'s tenant, or nullopt.
  std::optional<Tenant> Authenticate(const std::string& authorization,
                                     const std::string& x_api_key = "") const {
    return Check(authorization, x_api_key).tenant;
  }

  // HMAC-SHA256(secret, "prefixd tenant salt v1\n" + key) as 64 hex digits. Exposed for tests.
  static std::string SaltOf(const std::string& secret, const std::string& key);

 private:
  struct Key {
    Digest digest;  // the salt's bytes
    Tenant tenant;
  };
  Status AddKeys(Env* env, const std::string& path, bool admin);

  std::string secret_;
  std::vector<Key> keys_;
  bool has_admin_ = false;
};

// The key a request presents: from "Authorization: Bearer <key>" (scheme case-insensitive) and
// "x-api-key: <key>". nullopt when the two name different keys; "" when neither names one.
std::optional<std::string> PresentedKey(const std::string& authorization,
                                        const std::string& x_api_key);

// Reads <dir>/server-secret, creating it with fresh random bytes when missing.
Result<std::string> LoadOrCreateServerSecret(Env* env, const std::string& dir);

// The 401 for a request without a valid key, and the 403 for an admin route called without an
// admin key (or while admin routes are off), as every front of prefixd answers them.
ApiError UnauthorizedError(AuthFailure failure);
ApiError ForbiddenError(const TenantAuth& auth, const std::string& path);

}  // namespace prefixd::server
