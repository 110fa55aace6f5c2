#include "server/auth.h"

#include "server/api_error.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "util/hash.h"

namespace prefixd::server {
namespace {

constexpr size_t kSecretBytes = 32;

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r > 0) got += size_t(r);
  }
  return out;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// `what` names the file in errors ("api key file", "admin key file").
Result<std::vector<std::string>> ReadKeys(Env* env, const std::string& path,
                                          const std::string& what) {
  auto data = env->ReadFile(path);
  if (!data.ok()) return data.status().WithContext(what);
  std::istringstream in(std::string(data->begin(), data->end()));
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    line = Trim(line);
    if (!line.empty() && line[0] != '#') keys.push_back(line);
  }
  if (keys.empty()) return Status::InvalidArgument(what + " " + path + " lists no keys");
  return keys;
}

// The digest a key is known by; its hex is the tenant's salt.
Digest KeyDigest(const std::string& secret, const std::string& key) {
  return HmacSha256(secret, "prefixd tenant salt v1\n" + key);
}

}  // namespace

std::string TenantAuth::SaltOf(const std::string& secret, const std::string& key) {
  return DigestHex(KeyDigest(secret, key));
}

Result<std::string> LoadOrCreateServerSecret(Env* env, const std::string& dir) {
  if (dir.empty()) return RandomBytes(kSecretBytes);
  std::string path = JoinPath(dir, "server-secret");
  if (env->FileExists(path)) {
    auto data = env->ReadFile(path);
    if (!data.ok()) return data.status();
    if (data->size() != kSecretBytes) {
      return Status::Corruption(path + ": " + std::to_string(data->size()) + " bytes, expected " +
                                std::to_string(kSecretBytes));
    }
    return std::string(data->begin(), data->end());
  }
  std::string secret = RandomBytes(kSecretBytes);
  PREFIXD_RETURN_IF_ERROR(env->CreateDir(dir));
  PREFIXD_RETURN_IF_ERROR(env->WriteFileAtomic(
      path, {reinterpret_cast<const uint8_t*>(secret.data()), secret.size()}));
  return secret;  // created 0600 (Env: every file it creates is its owner's alone)
}

Status TenantAuth::AddKeys(Env* env, const std::string& path, bool admin) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<std::string> keys, ReadKeys(env, path, admin ? "admin key file" : "api key file"));
  for (const std::string& key : keys) {
    Digest digest = KeyDigest(secret_, key);
    auto same = std::find_if(keys_.begin(), keys_.end(), [&](const Key& k) {
      return DigestsEqualConstantTime(k.digest, digest);
    });
    if (same != keys_.end()) {  // listed twice, or in both files: one tenant
      same->tenant.admin = same->tenant.admin || admin;
      continue;
    }
    std::string salt = DigestHex(digest);
    std::string label = DigestHex(Sha256Of("prefixd tenant label v1\n" + salt), 4);
    keys_.push_back(Key{digest, Tenant{salt, label, admin}});
  }
  has_admin_ = has_admin_ || admin;
  return Status::OK();
}

Result<std::unique_ptr<TenantAuth>> TenantAuth::Create(Env* env, const AuthOptions& options) {
  auto auth = std::unique_ptr<TenantAuth>(new TenantAuth());
  if (options.key_file.empty() && options.admin_key_file.empty()) return auth;
  PREFIXD_ASSIGN_OR_RETURN(auth->secret_, LoadOrCreateServerSecret(env, options.secret_dir));
  if (!options.key_file.empty()) {
    PREFIXD_RETURN_IF_ERROR(auth->AddKeys(env, options.key_file, /*admin=*/false));
  }
  if (!options.admin_key_file.empty()) {
    PREFIXD_RETURN_IF_ERROR(auth->AddKeys(env, options.admin_key_file, /*admin=*/true));
  }
  return auth;
}

std::optional<std::string> PresentedKey(const std::string& authorization,
                                        const std::string& x_api_key) {
  std::string bearer;
  const std::string kScheme = "bearer ";
  if (authorization.size() >= kScheme.size() &&
      std::equal(kScheme.begin(), kScheme.end(), authorization.begin(),
                 [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
    bearer = Trim(authorization.substr(kScheme.size()));
  }
  std::string header = Trim(x_api_key);
  if (!bearer.empty() && !header.empty() && bearer != header) return std::nullopt;
  return bearer.empty() ? header : bearer;
}

TenantAuth::Outcome TenantAuth::Check(const std::string& authorization,
                                      const std::string& x_api_key) const {
  if (!enabled()) return {Tenant{"", "-", /*admin=*/true}};
  std::optional<std::string> key = PresentedKey(authorization, x_api_key);
  if (!key) return {std::nullopt, AuthFailure::kConflicting};
  if (key->empty()) return {std::nullopt, AuthFailure::kMissingKey};
  // Every listed digest is compared, in constant time, without stopping at a match.
  Digest digest = KeyDigest(secret_, *key);
  const Key* found = nullptr;
  for (const Key& k : keys_) {
    if (DigestsEqualConstantTime(k.digest, digest)) found = &k;
  }
  if (found == nullptr) return {std::nullopt, AuthFailure::kUnknownKey};
  return {found->tenant};
}

ApiError UnauthorizedError(AuthFailure failure) {
  std::string message =
      failure == AuthFailure::kConflicting
          ? "the \"Authorization\" and \"x-api-key\" headers name different API keys; send one"
          : "Incorrect or missing API key: send \"Authorization: Bearer <key>\" or "
            "\"x-api-key: <key>\"";
  return {ErrorKind::kUnauthorized, message, "", "invalid_api_key"};
}

ApiError ForbiddenError(const TenantAuth& auth, const std::string& path) {
  if (!auth.has_admin_keys()) {
    return {ErrorKind::kForbidden,
            path + " is an admin route and admin routes are off: start prefixd serve with "
                   "--admin-key-file FILE and call it with a key from that file",
            "", "admin_routes_disabled"};
  }
  return {ErrorKind::kForbidden,
          path + " is an admin route: this API key may not call it (use a key from "
                 "--admin-key-file)",
          "", "admin_key_required"};
}


}  // namespace prefixd::server
