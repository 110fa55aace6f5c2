// Tenancy: optional API keys, and the cache salt of each tenant.
//
// Without a key file there is one tenant, salt "", and every request is let in. With one, a
// request must carry "Authorization: Bearer <key>" naming a listed key, and its tenant's salt is
// HMAC-SHA256(server secret, key): chosen by the server, never by the client, so one tenant's
// cached prefixes can never be hit — or probed by timing — by another. The server secret is 32
// random bytes kept in <cache dir>/server-secret (mode 0600), so salts, and with them the disk
// cache, survive restarts; without a cache dir it is random per process.
//
// Key file: one key per line; blank lines and lines starting with '#' are skipped; surrounding
// whitespace is trimmed.
//
// Thread-safety: Authenticate() may be called from any thread; the object is immutable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "util/env.h"
#include "util/status.h"

namespace prefixd::server {

struct Tenant {
  std::string salt;   // handed to the engine; never logged
  std::string label;  // short, non-secret id for logs ("-" for the single tenant)
};

class TenantAuth {
 public:
  // `key_file` "" means no keys. `secret_dir` "" means a per-process secret.
  static Result<std::unique_ptr<TenantAuth>> Create(Env* env, const std::string& key_file,
                                                    const std::string& secret_dir);

  bool enabled() const { return !tenants_.empty(); }
  // The tenant of a request given its Authorization header ("" when absent); nullopt when keys
  // are enabled and the header does not name a listed key.
  std::optional<Tenant> Authenticate(const std::string& authorization) const;

  // HMAC-SHA256(secret, key) as 64 hex digits. Exposed for tests.
  static std::string SaltOf(const std::string& secret, const std::string& key);

 private:
  std::string secret_;
  std::unordered_map<std::string, Tenant> tenants_;  // by salt
};

// Reads <dir>/server-secret, creating it with fresh random bytes when missing.
Result<std::string> LoadOrCreateServerSecret(Env* env, const std::string& dir);

}  // namespace prefixd::server
