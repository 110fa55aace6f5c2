// Bounds-checked little helpers the state codec reads and writes bytes with (host byte order,
// as llama.cpp writes them). Internal to engine/state_*.cpp.
//
// ByteReader never reads past its span: every read checks the remaining length first and
// reports a Corruption naming what it was reading and at which offset.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "util/status.h"

namespace prefixd::engine::internal {

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, const char* what) : bytes_(bytes), what_(what) {}

  size_t offset() const { return off_; }
  size_t remaining() const { return bytes_.size() - off_; }
  bool at_end() const { return off_ == bytes_.size(); }
  void Seek(size_t off) { off_ = off <= bytes_.size() ? off : bytes_.size(); }

  template <typename T>
  Status Read(T* out, const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return Truncated(field, sizeof(T));
    std::memcpy(out, bytes_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    return Status::OK();
  }

  // Skips `n` bytes and returns their range in `out` (offset, size).
  Status Skip(uint64_t n, const char* field, size_t* begin) {
    if (n > remaining()) return Truncated(field, n);
    *begin = off_;
    off_ += size_t(n);
    return Status::OK();
  }

  // Corruption "<what>: <msg> at offset N".
  Status Error(const std::string& msg) const {
    return Status::Corruption(std::string(what_) + ": " + msg + " at offset " +
                              std::to_string(off_));
  }

 private:
  Status Truncated(const char* field, uint64_t need) const {
    return Error(std::string("truncated reading ") + field + " (need " + std::to_string(need) +
                 " bytes, " + std::to_string(remaining()) + " left)");
  }

  std::span<const uint8_t> bytes_;
  const char* what_;
  size_t off_ = 0;
};

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_pointer_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_->insert(out_->end(), p, p + sizeof(T));
  }
  void Append(std::span<const uint8_t> bytes) {
    out_->insert(out_->end(), bytes.begin(), bytes.end());
  }

 private:
  std::vector<uint8_t>* out_;
};

// Writes a state as a list of pieces instead of one buffer (a restore sets the state
// straight from the cached payloads, with no assembled copy). Fixed fields and short appends
// are copied into `headers`; an append of kMinPiece bytes or more becomes a piece pointing at
// the caller's bytes, which must outlive the pieces. Resolve() turns header pieces (recorded as
// offsets, since `headers` grows) into spans.
class PieceWriter {
 public:
  static constexpr size_t kMinPiece = 256;
  struct Piece {
    const uint8_t* data = nullptr;  // null: `offset` into headers
    size_t offset = 0;
    size_t size = 0;
  };

  PieceWriter(std::vector<uint8_t>* headers, std::vector<Piece>* pieces)
      : headers_(headers), pieces_(pieces) {}
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_pointer_v<T>);
    CopyIn(reinterpret_cast<const uint8_t*>(&v), sizeof(T));
  }
  void Append(std::span<const uint8_t> bytes) {
    if (bytes.size() < kMinPiece) return CopyIn(bytes.data(), bytes.size());
    pieces_->push_back({bytes.data(), 0, bytes.size()});
  }

 private:
  void CopyIn(const uint8_t* p, size_t n) {
    if (n == 0) return;
    if (pieces_->empty() || pieces_->back().data != nullptr) {
      pieces_->push_back({nullptr, headers_->size(), 0});
    }
    headers_->insert(headers_->end(), p, p + n);
    pieces_->back().size += n;
  }

  std::vector<uint8_t>* headers_;
  std::vector<Piece>* pieces_;
};

// a * b, or false on overflow.
inline bool MulChecked(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace prefixd::engine::internal
