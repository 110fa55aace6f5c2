// Hashing: SHA-256 (OpenSSL) for content addresses and fingerprints, HMAC-SHA256 (OpenSSL) for
// keyed digests, CRC32C for payload checks.
// All functions are pure and thread-safe; Sha256 objects are single-threaded.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace prefixd {

using Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. Update() any number of times, then Finish() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  // Hashes the value's bytes in little-endian order (the only order prefixd runs on).
  void UpdateU64(uint64_t v) { Update(&v, sizeof v); }
  Digest Finish();
  // The digest of everything hashed so far, without ending: Update() may continue after it.
  // Lets one pass over a text give the digests of several of its prefixes.
  Digest Peek() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

Digest Sha256Of(const void* data, size_t n);
inline Digest Sha256Of(std::string_view s) { return Sha256Of(s.data(), s.size()); }

// HMAC-SHA256(key, message) (RFC 2104) through OpenSSL. Any key length (longer than 64 bytes is
// hashed first, as the RFC says).
Digest HmacSha256(std::string_view key, std::string_view message);

// True when the digests are equal, in time that does not depend on where they differ
// (OpenSSL's CRYPTO_memcmp): for comparing secrets.
bool DigestsEqualConstantTime(const Digest& a, const Digest& b);

// Lower-case hex of the digest (64 characters), or of its first `n_bytes` bytes.
std::string DigestHex(const Digest& d, size_t n_bytes = 32);

// CRC32C (Castagnoli). Extend() continues a running crc.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
// The portable table version (what Crc32cExtend uses without SSE4.2); exposed for tests.
uint32_t Crc32cSoftware(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
// The crc of A || B from crc_a = Crc32c(A), crc_b = Crc32c(B) and |B|, without B's bytes:
// lets a check be taken piece by piece in any order and joined afterwards. O(log len_b).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Masked form for storing a crc next to the data it covers (as LevelDB does), so that a crc
// of data that itself contains crcs stays well distributed.
inline uint32_t Crc32cMask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t Crc32cUnmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace prefixd
