// Little-endian fixed-width integers, the byte order of every prefixd disk format
// (docs/disk-format.md): the one place the store's record files and index log encode and
// decode them. Independent of the host's byte order.
//
// Put*: appends to a byte vector. Encode*: writes into `dst`. Decode*: reads from `p`.
// REQUIRES: `dst` / `p` point at least at the integer's width of bytes.
#pragma once

#include <cstdint>
#include <vector>

namespace prefixd {

inline void EncodeFixed32(uint8_t* dst, uint32_t v) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void EncodeFixed64(uint8_t* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void PutFixed16(std::vector<uint8_t>* out, uint16_t v) {
  out->push_back(static_cast<uint8_t>(v));
  out->push_back(static_cast<uint8_t>(v >> 8));
}
inline void PutFixed32(std::vector<uint8_t>* out, uint32_t v) {
  uint8_t b[4];
  EncodeFixed32(b, v);
  out->insert(out->end(), b, b + 4);
}
inline void PutFixed64(std::vector<uint8_t>* out, uint64_t v) {
  uint8_t b[8];
  EncodeFixed64(b, v);
  out->insert(out->end(), b, b + 8);
}

inline uint16_t DecodeFixed16(const uint8_t* p) {
  return static_cast<uint16_t>(uint16_t{p[0]} | uint16_t{p[1]} << 8);
}
inline uint32_t DecodeFixed32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t DecodeFixed64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace prefixd
