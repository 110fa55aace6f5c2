#include "util/aead.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <memory>

namespace prefixd {

namespace {

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

// EVP takes int lengths: larger inputs go through in pieces.
constexpr size_t kMaxPiece = size_t(1) << 30;

bool Update(EVP_CIPHER_CTX* c, uint8_t* out, std::span<const uint8_t> in) {
  for (size_t at = 0; at < in.size(); at += kMaxPiece) {
    const int n = int(std::min(kMaxPiece, in.size() - at));
    int written = 0;
    if (EVP_CipherUpdate(c, out ? out + at : nullptr, &written, in.data() + at, n) != 1) return false;
  }
  return true;
}

}  // namespace

AeadKey DeriveAeadKey(std::string_view secret, std::string_view purpose) {
  return HmacSha256(secret, purpose);
}

Result<AeadKey> HkdfAeadKey(std::string_view material, std::string_view salt,
                            std::string_view info) {
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> c(
      EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), &EVP_PKEY_CTX_free);
  auto bytes = [](std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); };
  AeadKey key{};
  size_t n = key.size();
  // An empty salt or info is left unset (what RFC 5869 means by "not provided").
  const bool ok =
      c && !material.empty() && EVP_PKEY_derive_init(c.get()) == 1 &&
      EVP_PKEY_CTX_set_hkdf_md(c.get(), EVP_sha256()) == 1 &&
      (salt.empty() || EVP_PKEY_CTX_set1_hkdf_salt(c.get(), bytes(salt), int(salt.size())) == 1) &&
      EVP_PKEY_CTX_set1_hkdf_key(c.get(), bytes(material), int(material.size())) == 1 &&
      (info.empty() || EVP_PKEY_CTX_add1_hkdf_info(c.get(), bytes(info), int(info.size())) == 1) &&
      EVP_PKEY_derive(c.get(), key.data(), &n) == 1 && n == key.size();
  if (!ok) return Status::Internal("HKDF-SHA256 failed (OpenSSL)");
  return key;
}

Status AeadSeal(const AeadKey& key, std::span<const uint8_t> aad,
                std::span<const std::span<const uint8_t>> pieces, std::vector<uint8_t>* out) {
  size_t n = 0;
  for (std::span<const uint8_t> p : pieces) n += p.size();
  const size_t start = out->size();
  out->resize(start + kAeadNonceBytes + n + kAeadTagBytes);
  uint8_t* nonce = out->data() + start;
  uint8_t* body = nonce + kAeadNonceBytes;
  if (RAND_bytes(nonce, int(kAeadNonceBytes)) != 1) {
    out->resize(start);
    return Status::IOError("no random bytes for a nonce (OpenSSL RAND_bytes)");
  }
  Ctx c(EVP_CIPHER_CTX_new());
  bool ok = c && EVP_EncryptInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) == 1 &&
            Update(c.get(), nullptr, aad);
  size_t at = 0;
  for (std::span<const uint8_t> p : pieces) {
    ok = ok && Update(c.get(), body + at, p);
    at += p.size();
  }
  int tail = 0;
  ok = ok && EVP_EncryptFinal_ex(c.get(), body + n, &tail) == 1 &&
       EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_GET_TAG, int(kAeadTagBytes), body + n) == 1;
  if (!ok) {
    out->resize(start);
    return Status::Internal("AES-256-GCM sealing failed (OpenSSL)");
  }
  return Status::OK();
}

Result<std::vector<uint8_t>> AeadOpen(const AeadKey& key, std::span<const uint8_t> aad,
                                      std::span<const uint8_t> sealed) {
  if (sealed.size() < kAeadOverheadBytes) {
    return Status::Corruption("a sealed payload of " + std::to_string(sealed.size()) +
                              " bytes is shorter than its nonce and tag");
  }
  const uint8_t* nonce = sealed.data();
  std::span<const uint8_t> body = sealed.subspan(kAeadNonceBytes, sealed.size() - kAeadOverheadBytes);
  std::vector<uint8_t> tag(sealed.end() - kAeadTagBytes, sealed.end());
  std::vector<uint8_t> plain(body.size());
  Ctx c(EVP_CIPHER_CTX_new());
  int tail = 0;
  const bool ok = c && EVP_DecryptInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) == 1 &&
                  Update(c.get(), nullptr, aad) && Update(c.get(), plain.data(), body) &&
                  EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_SET_TAG, int(kAeadTagBytes), tag.data()) == 1 &&
                  EVP_DecryptFinal_ex(c.get(), plain.data() + plain.size(), &tail) == 1;
  if (!ok) {
    return Status::Corruption("a sealed payload does not verify (another key, or changed bytes)");
  }
  return plain;
}

}  // namespace prefixd
