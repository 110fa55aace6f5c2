// MsgpackWriter: appends values in MessagePack's format (github.com/msgpack/msgpack spec):
// the few types KV events use, each in its shortest form, as msgpack's own encoders choose.
// Arrays and maps are written as a header with their count; the caller then writes that many
// values (twice that many for a map: key, value, ...).
//
// Thread-safety: none; one writer per message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace prefixd::events {

class MsgpackWriter {
 public:
  void Nil();
  void Int(int64_t v);    // positive fixint .. int64, shortest
  void Uint(uint64_t v);  // positive fixint .. uint64, shortest
  void Double(double v);  // float64
  void Str(std::string_view s);
  void Array(size_t n);
  void Map(size_t n);

  const std::string& bytes() const { return out_; }

 private:
  void Byte(uint8_t b) { out_.push_back(char(b)); }
  void BigEndian(uint64_t v, int n_bytes);
  std::string out_;
};

}  // namespace prefixd::events
