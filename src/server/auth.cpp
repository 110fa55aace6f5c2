#include "server/auth.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <sstream>

#include "util/hash.h"

namespace prefixd::server {
namespace {

constexpr size_t kSecretBytes = 32;
constexpr size_t kSha256Block = 64;

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r > 0) got += size_t(r);
  }
  return out;
}

std::string HmacSha256(const std::string& key, const std::string& message) {
  std::string k = key.size() > kSha256Block
                      ? std::string(reinterpret_cast<const char*>(Sha256Of(key).data()), 32)
                      : key;
  k.resize(kSha256Block, '\0');
  std::string ipad = k, opad = k;
  for (size_t i = 0; i < kSha256Block; ++i) {
    ipad[i] = char(ipad[i] ^ 0x36);
    opad[i] = char(opad[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.Update(ipad);
  inner.Update(message);
  Digest d = inner.Finish();
  Sha256 outer;
  outer.Update(opad);
  outer.Update(d.data(), d.size());
  Digest mac = outer.Finish();
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string Hex(const std::string& bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

Result<std::vector<std::string>> ReadKeys(Env* env, const std::string& path) {
  auto data = env->ReadFile(path);
  if (!data.ok()) return data.status().WithContext("api key file");
  std::istringstream in(std::string(data->begin(), data->end()));
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    line = Trim(line);
    if (!line.empty() && line[0] != '#') keys.push_back(line);
  }
  if (keys.empty()) return Status::InvalidArgument("api key file " + path + " lists no keys");
  return keys;
}

}  // namespace

std::string TenantAuth::SaltOf(const std::string& secret, const std::string& key) {
  return Hex(HmacSha256(secret, "prefixd tenant salt v1\n" + key));
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
  ::chmod(path.c_str(), 0600);
  return secret;
}

Result<std::unique_ptr<TenantAuth>> TenantAuth::Create(Env* env, const std::string& key_file,
                                                       const std::string& secret_dir) {
  auto auth = std::unique_ptr<TenantAuth>(new TenantAuth());
  if (key_file.empty()) return auth;
  PREFIXD_ASSIGN_OR_RETURN(std::vector<std::string> keys, ReadKeys(env, key_file));
  PREFIXD_ASSIGN_OR_RETURN(auth->secret_, LoadOrCreateServerSecret(env, secret_dir));
  for (const std::string& key : keys) {
    std::string salt = SaltOf(auth->secret_, key);
    std::string label = DigestHex(Sha256Of("prefixd tenant label v1\n" + salt), 4);
    auth->tenants_[salt] = Tenant{salt, label};
  }
  return auth;
}

std::optional<Tenant> TenantAuth::Authenticate(const std::string& authorization) const {
  if (!enabled()) return Tenant{"", "-"};
  const std::string kBearer = "Bearer ";
  if (authorization.compare(0, kBearer.size(), kBearer) != 0) return std::nullopt;
  // Looked up by HMAC, so the time taken says nothing about how close a wrong key was.
  auto it = tenants_.find(SaltOf(secret_, Trim(authorization.substr(kBearer.size()))));
  if (it == tenants_.end()) return std::nullopt;
  return it->second;
}

}  // namespace prefixd::server
