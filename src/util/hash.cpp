#include "util/hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <cstring>

namespace prefixd {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (impl_->ctx == nullptr || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1) {
    std::abort();  // OpenSSL without SHA-256 is a broken installation, not a run-time error
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::Update(const void* data, size_t n) {
  if (n > 0) EVP_DigestUpdate(impl_->ctx, data, n);
}

Digest Sha256::Finish() {
  Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, d.data(), &len);
  return d;
}

Digest Sha256::Peek() const {
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  if (copy == nullptr || EVP_MD_CTX_copy_ex(copy, impl_->ctx) != 1) std::abort();
  Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(copy, d.data(), &len);
  EVP_MD_CTX_free(copy);
  return d;
}

Digest Sha256Of(const void* data, size_t n) {
  Sha256 h;
  h.Update(data, n);
  return h.Finish();
}

Digest HmacSha256(std::string_view key, std::string_view message) {
  Digest d{};
  unsigned int len = 0;
  static const unsigned char kNone = 0;  // OpenSSL reads a null key as "reuse the last one"
  const void* k = key.empty() ? static_cast<const void*>(&kNone) : key.data();
  const auto* msg = message.empty() ? &kNone
                                    : reinterpret_cast<const unsigned char*>(message.data());
  if (HMAC(EVP_sha256(), k, int(key.size()), msg, message.size(), d.data(), &len) ==
          nullptr ||
      len != d.size()) {
    std::abort();  // as for SHA-256: a broken installation, not a run-time error
  }
  return d;
}

bool DigestsEqualConstantTime(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string DigestHex(const Digest& d, size_t n_bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  if (n_bytes > d.size()) n_bytes = d.size();
  out.reserve(n_bytes * 2);
  for (size_t i = 0; i < n_bytes; ++i) {
    out.push_back(kHex[d[i] >> 4]);
    out.push_back(kHex[d[i] & 15]);
  }
  return out;
}

namespace {

struct Crc32cTable {
  uint32_t t[8][256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};

const Crc32cTable& Table() {
  static const Crc32cTable table;
  return table;
}

}  // namespace

namespace {

#if defined(__x86_64__)
// The SSE4.2 crc32 instruction computes CRC32C: ~10x the table version, so verifying a record
// costs far less than reading it. It has a latency of 3 cycles and a throughput of 1 per cycle,
// so one dependency chain runs at a third of its speed: long buffers run three chains over
// three lanes side by side and join them (the restore checks every byte it reads).
__attribute__((target("sse4.2"))) uint64_t Crc32cRaw(uint64_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}

// The lane length of the three-chain loop, and the linear map "append kLane zero bytes" on the
// raw (uninverted) crc register as four byte tables: crc(r, A || B) = Shift(crc(r, A)) ^
// crc(0, B) when |B| == kLane.
constexpr size_t kLane = 4096;

struct Crc32cShift {
  uint32_t t[4][256];
  Crc32cShift() {
    static const uint8_t zeros[kLane] = {};
    uint32_t basis[32];
    for (int i = 0; i < 32; ++i) basis[i] = uint32_t(Crc32cRaw(uint32_t(1) << i, zeros, kLane));
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int i = 0; i < 8; ++i) {
          if (b >> i & 1) v ^= basis[8 * k + i];
        }
        t[k][b] = v;
      }
    }
  }
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][c >> 8 & 0xff] ^ t[2][c >> 16 & 0xff] ^ t[3][c >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const uint8_t* p,
                                                           size_t n) {
  static const Crc32cShift shift;
  uint64_t c0 = ~crc;
  while (n >= 3 * kLane) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < kLane; i += 8) {
      uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kLane + i, 8);
      std::memcpy(&v2, p + 2 * kLane + i, 8);
      c0 = __builtin_ia32_crc32di(c0, v0);
      c1 = __builtin_ia32_crc32di(c1, v1);
      c2 = __builtin_ia32_crc32di(c2, v2);
    }
    c0 = shift(uint32_t(c0)) ^ uint32_t(c1);
    c0 = shift(uint32_t(c0)) ^ uint32_t(c2);
    p += 3 * kLane;
    n -= 3 * kLane;
  }
  return ~uint32_t(Crc32cRaw(uint32_t(c0), p, n));
}

bool HasHardwareCrc32c() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HasHardwareCrc32c()) return Crc32cHardware(crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cSoftware(crc, data, n);
}

// Crc32cCombine works in GF(2)[x] modulo the CRC32C polynomial, in the crc's reflected bit
// order (bit 31 is x^0). Appending n zero bytes to A multiplies its register by x^(8n); the
// pre- and post-inversion cancel out between the two crcs, so
// crc(A || B) = crc_a * x^(8 |B|) + crc_b.
namespace {

constexpr uint32_t kCrc32cPolyReflected = 0x82f63b78u;

// a * b modulo the polynomial.
uint32_t MulModPoly(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kCrc32cPolyReflected : b >> 1;  // b *= x
  }
  return product;
}

// x^(2^k) modulo the polynomial, k = 0..66 (8 n for any 64-bit n).
struct PowersOfX {
  uint32_t p[67];
  PowersOfX() {
    p[0] = 1u << 30;  // x^1
    for (int k = 1; k < 67; ++k) p[k] = MulModPoly(p[k - 1], p[k - 1]);
  }
};

// x^(8 n) modulo the polynomial.
uint32_t XPow8n(uint64_t n) {
  static const PowersOfX powers;
  uint32_t r = 1u << 31;  // x^0
  for (int k = 3; n != 0; n >>= 1, ++k) {
    if (n & 1) r = MulModPoly(powers.p[k], r);
  }
  return r;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return MulModPoly(XPow8n(len_b), crc_a) ^ crc_b;
}

// Slicing-by-8, for CPUs without a crc32 instruction.
uint32_t Crc32cSoftware(uint32_t crc, const void* data, size_t n) {
  const auto& t = Table().t;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                       uint32_t(p[3]) << 24);
    uint32_t hi = uint32_t(p[4]) | uint32_t(p[5]) << 8 | uint32_t(p[6]) << 16 |
                  uint32_t(p[7]) << 24;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

}  // namespace prefixd
