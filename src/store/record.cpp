#include "store/record.h"

#include <algorithm>
#include <cstring>

#include "util/buffer_pool.h"
#include "util/coding.h"

namespace prefixd::store {

namespace {

void PutDigest(std::vector<uint8_t>* out, const Digest& d) {
  out->insert(out->end(), d.begin(), d.end());
}

Digest GetDigest(const uint8_t* p) {
  Digest d;
  std::memcpy(d.data(), p, d.size());
  return d;
}

bool ParseHex(std::string_view hex, Digest* out) {
  if (hex.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

}  // namespace

const char* RecordKindName(RecordKind kind) {
  switch (kind) {
    case RecordKind::kBlockRows: return "rows";
    case RecordKind::kSnapshot: return "snap";
    case RecordKind::kTail: return "tail";
    case RecordKind::kEmbeddings: return "embd";
  }
  return "?";
}

std::optional<RecordKind> ParseRecordKind(std::string_view name) {
  for (RecordKind k : {RecordKind::kBlockRows, RecordKind::kSnapshot, RecordKind::kTail,
                       RecordKind::kEmbeddings}) {
    if (name == RecordKindName(k)) return k;
  }
  return std::nullopt;
}

std::string RecordFileName(const RecordId& id) {
  return DigestHex(id.key) + "." + RecordKindName(id.kind);
}

std::optional<RecordId> ParseRecordFileName(std::string_view name) {
  if (name.size() < 66 || name[64] != '.') return std::nullopt;
  RecordId id;
  if (!ParseHex(name.substr(0, 64), &id.key)) return std::nullopt;
  std::optional<RecordKind> kind = ParseRecordKind(name.substr(65));
  if (!kind) return std::nullopt;
  id.kind = *kind;
  return id;
}

void AppendHeaderBody(const RecordMeta& meta, uint64_t created_ms, std::vector<uint8_t>* out) {
  out->reserve(out->size() + HeaderBodyBytes(meta.tokens.size()));
  PutDigest(out, meta.key);
  PutDigest(out, meta.parent);
  PutDigest(out, meta.domain);
  out->push_back(static_cast<uint8_t>(meta.kind));
  out->push_back(meta.snapshot_kind);
  PutFixed16(out, meta.sealed ? kRecordFlagSealed : 0);
  PutFixed32(out, meta.position);
  PutFixed64(out, created_ms);
  PutFixed32(out, static_cast<uint32_t>(meta.tokens.size()));
  for (int32_t t : meta.tokens) PutFixed32(out, static_cast<uint32_t>(t));
}

Result<RecordMeta> DecodeHeaderBody(std::span<const uint8_t> body, uint64_t* created_ms) {
  if (body.size() < kHeaderFixedBytes) {
    return Status::Corruption("header body of " + std::to_string(body.size()) +
                              " bytes is shorter than " + std::to_string(kHeaderFixedBytes));
  }
  const uint8_t* p = body.data();
  RecordMeta m;
  m.key = GetDigest(p);
  m.parent = GetDigest(p + 32);
  m.domain = GetDigest(p + 64);
  m.kind = static_cast<RecordKind>(p[96]);
  if (RecordKindName(m.kind)[0] == '?') {
    return Status::Corruption("unknown record kind " + std::to_string(p[96]));
  }
  m.snapshot_kind = p[97];
  const uint16_t flags = DecodeFixed16(p + 98);
  if ((flags & ~kRecordFlagSealed) != 0) {
    return Status::Corruption("unknown record flags " + std::to_string(flags));
  }
  m.sealed = (flags & kRecordFlagSealed) != 0;
  m.position = DecodeFixed32(p + 100);
  *created_ms = DecodeFixed64(p + 104);
  uint32_t n_tokens = DecodeFixed32(p + 112);
  if (n_tokens > kMaxTokensPerRecord || body.size() != HeaderBodyBytes(n_tokens)) {
    return Status::Corruption("header body of " + std::to_string(body.size()) +
                              " bytes does not hold " + std::to_string(n_tokens) + " tokens");
  }
  m.tokens.resize(n_tokens);
  for (uint32_t i = 0; i < n_tokens; ++i) {
    m.tokens[i] = static_cast<int32_t>(DecodeFixed32(p + kHeaderFixedBytes + 4 * i));
  }
  return m;
}

std::vector<uint8_t> EncodeRecordFront(const RecordMeta& meta, uint64_t created_ms) {
  std::vector<uint8_t> out;
  size_t h = HeaderBodyBytes(meta.tokens.size());
  out.reserve(kPrefixBytes + h + 12);
  PutFixed32(&out, kRecordMagic);
  PutFixed16(&out, kRecordVersion);
  PutFixed16(&out, 0);
  PutFixed32(&out, static_cast<uint32_t>(h));
  AppendHeaderBody(meta, created_ms, &out);
  PutFixed32(&out, Crc32cMask(Crc32c(out.data(), out.size())));
  PutFixed64(&out, meta.payload_bytes);
  return out;
}

uint32_t PayloadCrc(uint64_t payload_len, std::span<const uint8_t> payload) {
  uint8_t len[8];
  EncodeFixed64(len, payload_len);
  uint32_t crc = Crc32cExtend(Crc32c(len, sizeof len), payload.data(), payload.size());
  return Crc32cMask(crc);
}

Result<uint32_t> DecodePrefix(std::span<const uint8_t> prefix) {
  if (prefix.size() < kPrefixBytes) {
    return Status::Corruption("file of " + std::to_string(prefix.size()) +
                              " bytes is shorter than the record prefix");
  }
  uint32_t magic = DecodeFixed32(prefix.data());
  if (magic != kRecordMagic) return Status::Corruption("bad magic");
  uint16_t version = DecodeFixed16(prefix.data() + 4);
  if (version != kRecordVersion) {
    return Status::NotSupported("unsupported record version " + std::to_string(version));
  }
  uint32_t h = DecodeFixed32(prefix.data() + 8);
  if (h < kHeaderFixedBytes || h > HeaderBodyBytes(kMaxTokensPerRecord)) {
    return Status::Corruption("implausible header length " + std::to_string(h));
  }
  return h;
}

Result<DecodedFront> DecodeRecordFront(std::span<const uint8_t> front, uint64_t file_bytes) {
  PREFIXD_ASSIGN_OR_RETURN(uint32_t h, DecodePrefix(front));
  if (front.size() < kPrefixBytes + h + 12) {
    return Status::Corruption("truncated header: " + std::to_string(front.size()) + " of " +
                              std::to_string(kPrefixBytes + h + 12) + " bytes");
  }
  const uint8_t* p = front.data();
  uint32_t stored = Crc32cUnmask(DecodeFixed32(p + kPrefixBytes + h));
  if (stored != Crc32c(p, kPrefixBytes + h)) return Status::Corruption("header checksum mismatch");
  DecodedFront out;
  PREFIXD_ASSIGN_OR_RETURN(out.meta, DecodeHeaderBody(front.subspan(kPrefixBytes, h),
                                                      &out.created_ms));
  out.meta.payload_bytes = DecodeFixed64(p + kPrefixBytes + h + 4);
  uint64_t expected = RecordFileBytes(out.meta);
  if (out.meta.payload_bytes > file_bytes || expected != file_bytes) {
    return Status::Corruption("file size " + std::to_string(file_bytes) + " != 28 + " +
                              std::to_string(h) + " + " +
                              std::to_string(out.meta.payload_bytes) + " (truncated or torn)");
  }
  return out;
}

std::vector<uint8_t> EncodeRecord(RecordMeta meta, uint64_t created_ms,
                                  std::span<const uint8_t> payload) {
  meta.payload_bytes = payload.size();
  std::vector<uint8_t> out = EncodeRecordFront(meta, created_ms);
  out.reserve(out.size() + payload.size() + 4);
  out.insert(out.end(), payload.begin(), payload.end());
  PutFixed32(&out, PayloadCrc(payload.size(), payload));
  return out;
}

Result<Record> DecodeRecord(std::span<const uint8_t> bytes) {
  PREFIXD_ASSIGN_OR_RETURN(uint32_t h, DecodePrefix(bytes));
  PREFIXD_ASSIGN_OR_RETURN(DecodedFront front, DecodeRecordFront(bytes, bytes.size()));
  const size_t start = kPrefixBytes + h + 12, n = front.meta.payload_bytes;
  std::span<const uint8_t> payload = bytes.subspan(start, n);
  if (DecodeFixed32(bytes.data() + start + n) != PayloadCrc(n, payload)) {
    return Status::Corruption("payload checksum mismatch");
  }
  return Record{std::move(front.meta), std::vector<uint8_t>(payload.begin(), payload.end())};
}

Result<Record> DecodeRecordStream(uint64_t length,
                                  const std::function<bool(uint8_t* dst, size_t n)>& read) {
  std::vector<uint8_t> front(kPrefixBytes);
  if (length < kPrefixBytes + 16) return Status::Corruption("record of " + std::to_string(length) + " bytes");
  if (!read(front.data(), kPrefixBytes)) return Status::IOError("record: read failed");
  PREFIXD_ASSIGN_OR_RETURN(uint32_t h, DecodePrefix(front));
  if (kPrefixBytes + h + 16 > length) return Status::Corruption("truncated header");
  front.resize(kPrefixBytes + h + 12);
  if (!read(front.data() + kPrefixBytes, h + 12)) return Status::IOError("record: read failed");
  PREFIXD_ASSIGN_OR_RETURN(DecodedFront decoded, DecodeRecordFront(front, length));
  Record rec{std::move(decoded.meta), {}};
  rec.payload = BufferPool::Shared().Take(rec.meta.payload_bytes);
  // The checksum runs a slice behind the read, over bytes still in the CPU's cache.
  constexpr size_t kSlice = size_t(256) << 10;
  uint8_t len[8];
  EncodeFixed64(len, rec.payload.size());
  uint32_t crc = Crc32c(len, sizeof len);
  for (size_t done = 0; done < rec.payload.size();) {
    const size_t n = std::min(kSlice, rec.payload.size() - done);
    if (!read(rec.payload.data() + done, n)) return Status::IOError("record: read failed");
    crc = Crc32cExtend(crc, rec.payload.data() + done, n);
    done += n;
  }
  uint8_t trailer[4];
  if (!read(trailer, sizeof trailer)) return Status::IOError("record: read failed");
  if (DecodeFixed32(trailer) != Crc32cMask(crc)) {
    return Status::Corruption("payload checksum mismatch");
  }
  return rec;
}

}  // namespace prefixd::store
