// Authenticated encryption: AES-256-GCM through OpenSSL, for cache records at rest
// (store/sealed_store.h). A sealed message is nonce (12 random bytes) || ciphertext || tag (16):
// Open() returns the plaintext only when the tag verifies under the key and the same
// associated data, so a changed byte, a record moved to another identity, or a record sealed
// under another key is refused, not decrypted into garbage.
//
// Pure functions over their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "util/hash.h"
#include "util/status.h"

namespace prefixd {

inline constexpr size_t kAeadNonceBytes = 12;
inline constexpr size_t kAeadTagBytes = 16;
inline constexpr size_t kAeadOverheadBytes = kAeadNonceBytes + kAeadTagBytes;

using AeadKey = Digest;  // 32 bytes: AES-256

// Derives the key for `purpose` from a secret (HMAC-SHA256(secret, purpose)). Tests use it for
// a quick key; `serve --encrypt-cache` takes its key through HkdfAeadKey (store/sealing_key.h).
AeadKey DeriveAeadKey(std::string_view secret, std::string_view purpose);

// HKDF-SHA256 (RFC 5869, OpenSSL's EVP_PKEY_HKDF): the first 32 bytes of the output keying
// material from `material` (not empty), `salt` (empty: HashLen zero bytes) and `info` (the
// purpose, which separates one use of the material from every other). Internal when OpenSSL
// fails or `material` is empty.
Result<AeadKey> HkdfAeadKey(std::string_view material, std::string_view salt,
                            std::string_view info);

// Appends nonce || AES-256-GCM(plaintext) || tag to `out`, the tag covering `aad` too. The
// plaintext is `pieces` one after another, sealed where they lie (never joined first).
// Fails only when OpenSSL does (no random bytes, say).
Status AeadSeal(const AeadKey& key, std::span<const uint8_t> aad,
                std::span<const std::span<const uint8_t>> pieces, std::vector<uint8_t>* out);
inline Status AeadSeal(const AeadKey& key, std::span<const uint8_t> aad,
                       std::span<const uint8_t> plaintext, std::vector<uint8_t>* out) {
  return AeadSeal(key, aad, std::span<const std::span<const uint8_t>>(&plaintext, 1), out);
}
// The plaintext of a sealed message; Corruption when it is too short or does not verify.
Result<std::vector<uint8_t>> AeadOpen(const AeadKey& key, std::span<const uint8_t> aad,
                                      std::span<const uint8_t> sealed);

}  // namespace prefixd
