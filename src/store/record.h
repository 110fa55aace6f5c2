// The record file format of the disk tier (docs/disk-format.md): encoding and verifying
// decoding of record files and of the header body the index log reuses.
//
// All functions are pure and thread-safe. A decoder returns Corruption naming what it found
// wrong, or NotSupported for a version it does not know.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/hash.h"
#include "util/status.h"

namespace prefixd::store {

using Key = prefixd::Digest;  // content address: chain hash of a block, or a tail key

// kEmbeddings: an image's embeddings (the image encoder's output, engine/vision/projector.h),
// keyed by the image's identity in its tenant, outside every prefix tree.
enum class RecordKind : uint8_t { kBlockRows = 1, kSnapshot = 2, kTail = 3, kEmbeddings = 4 };

// "rows", "snap", "tail", "embd": the file name suffix. "?" for a value outside the enum.
const char* RecordKindName(RecordKind kind);
std::optional<RecordKind> ParseRecordKind(std::string_view name);

struct RecordMeta {
  Key key{};
  Key parent{};                  // parent chain hash (zeros for the first block)
  prefixd::Digest domain{};      // domain root: model + layout + tenant
  RecordKind kind = RecordKind::kBlockRows;
  uint8_t snapshot_kind = 0;     // opaque to the store
  uint32_t position = 0;         // P: token position the record ends at
  std::vector<int32_t> tokens;   // the block's or tail's own tokens, for verification
  uint64_t payload_bytes = 0;
  uint64_t last_access_unix_ms = 0;
  // The payload is sealed (store/sealed_store.h): tokens and state encrypted and authenticated
  // inside it, `tokens` empty here. A reader without the key never uses such a record.
  bool sealed = false;

  bool operator==(const RecordMeta&) const = default;
};

// The store's identity of a record.
struct RecordId {
  Key key{};
  RecordKind kind = RecordKind::kBlockRows;
  auto operator<=>(const RecordId&) const = default;
};

inline RecordId IdOf(const RecordMeta& m) { return RecordId{m.key, m.kind}; }

// "<64 hex key>.<kind>"; the fan-out directory is the first two hex digits.
std::string RecordFileName(const RecordId& id);
std::optional<RecordId> ParseRecordFileName(std::string_view name);

inline constexpr uint32_t kRecordMagic = 0x52445850;  // "PXDR" in file byte order
inline constexpr uint16_t kRecordVersion = 1;
inline constexpr size_t kPrefixBytes = 12;            // magic, version, reserved, header_len
inline constexpr size_t kHeaderFixedBytes = 116;      // header body without the tokens
inline constexpr size_t kMaxTokensPerRecord = 1 << 20;
inline constexpr uint16_t kRecordFlagSealed = 1;      // header body flags (offset 98)

// Header body size for a record with `n_tokens` tokens.
inline size_t HeaderBodyBytes(size_t n_tokens) { return kHeaderFixedBytes + 4 * n_tokens; }
// Whole file size: 28 + header body + payload.
inline uint64_t RecordFileBytes(const RecordMeta& m) {
  return 28 + HeaderBodyBytes(m.tokens.size()) + m.payload_bytes;
}

// Appends the header body (docs: "Header body") to `out`.
void AppendHeaderBody(const RecordMeta& meta, uint64_t created_ms, std::vector<uint8_t>* out);
// Decodes a header body; `last_access_unix_ms` is left 0 and `payload_bytes` unset.
Result<RecordMeta> DecodeHeaderBody(std::span<const uint8_t> body, uint64_t* created_ms);

// Everything in front of the payload: prefix, header body, header crc, payload_len.
// REQUIRES: meta.payload_bytes is the payload's size.
std::vector<uint8_t> EncodeRecordFront(const RecordMeta& meta, uint64_t created_ms);
// The trailer: masked crc of payload_len + payload.
uint32_t PayloadCrc(uint64_t payload_len, std::span<const uint8_t> payload);

// Reads the fixed prefix; returns the header body length H. Needs kPrefixBytes bytes.
Result<uint32_t> DecodePrefix(std::span<const uint8_t> prefix);

struct DecodedFront {
  RecordMeta meta;  // payload_bytes set from the file
  uint64_t created_ms = 0;
};
// Decodes and verifies [prefix, header body, header crc, payload_len]: the first
// kPrefixBytes + H + 12 bytes of a file whose total size is `file_bytes`.
Result<DecodedFront> DecodeRecordFront(std::span<const uint8_t> front, uint64_t file_bytes);

// A verified record: its header as read from the file, and its payload.
struct Record {
  RecordMeta meta;
  std::vector<uint8_t> payload;
};

// A whole record (front, payload, payload crc) in one buffer: what the shared tier stores as a
// value, byte for byte a record file. Sets meta.payload_bytes from the payload.
std::vector<uint8_t> EncodeRecord(RecordMeta meta, uint64_t created_ms,
                                  std::span<const uint8_t> payload);
// Decodes and verifies a whole record held in one buffer (both checksums, every size), naming
// what is wrong as a record file's decoder does.
Result<Record> DecodeRecord(std::span<const uint8_t> bytes);
// The same for a record of `length` bytes read in order by `read(dst, n)` (false: the bytes
// could not be read): the front into a small buffer, the payload once, straight into the
// Record. IOError when a read fails, Corruption as DecodeRecord.
Result<Record> DecodeRecordStream(uint64_t length,
                                  const std::function<bool(uint8_t* dst, size_t n)>& read);

}  // namespace prefixd::store
