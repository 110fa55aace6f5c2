#include "events/msgpack.h"

#include <cstring>

namespace prefixd::events {

void MsgpackWriter::BigEndian(uint64_t v, int n_bytes) {
  for (int i = n_bytes - 1; i >= 0; --i) Byte(uint8_t(v >> (8 * i)));
}

void MsgpackWriter::Nil() { Byte(0xc0); }

void MsgpackWriter::Uint(uint64_t v) {
  if (v < 0x80) return Byte(uint8_t(v));
  if (v <= 0xff) return Byte(0xcc), Byte(uint8_t(v));
  if (v <= 0xffff) return Byte(0xcd), BigEndian(v, 2);
  if (v <= 0xffffffffu) return Byte(0xce), BigEndian(v, 4);
  Byte(0xcf);
  BigEndian(v, 8);
}

void MsgpackWriter::Int(int64_t v) {
  if (v >= 0) return Uint(uint64_t(v));
  if (v >= -32) return Byte(uint8_t(int8_t(v)));  // negative fixint
  if (v >= INT8_MIN) return Byte(0xd0), Byte(uint8_t(int8_t(v)));
  if (v >= INT16_MIN) return Byte(0xd1), BigEndian(uint16_t(int16_t(v)), 2);
  if (v >= INT32_MIN) return Byte(0xd2), BigEndian(uint32_t(int32_t(v)), 4);
  Byte(0xd3);
  BigEndian(uint64_t(v), 8);
}

void MsgpackWriter::Double(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  Byte(0xcb);
  BigEndian(bits, 8);
}

void MsgpackWriter::Str(std::string_view s) {
  const size_t n = s.size();
  if (n < 32) {
    Byte(uint8_t(0xa0 | n));
  } else if (n <= 0xff) {
    Byte(0xd9), Byte(uint8_t(n));
  } else if (n <= 0xffff) {
    Byte(0xda), BigEndian(n, 2);
  } else {
    Byte(0xdb), BigEndian(n, 4);
  }
  out_.append(s);
}

void MsgpackWriter::Array(size_t n) {
  if (n < 16) return Byte(uint8_t(0x90 | n));
  if (n <= 0xffff) return Byte(0xdc), BigEndian(n, 2);
  Byte(0xdd);
  BigEndian(n, 4);
}

void MsgpackWriter::Map(size_t n) {
  if (n < 16) return Byte(uint8_t(0x80 | n));
  if (n <= 0xffff) return Byte(0xde), BigEndian(n, 2);
  Byte(0xdf);
  BigEndian(n, 4);
}

}  // namespace prefixd::events
