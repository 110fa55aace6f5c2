#include "store/record_store.h"

#include "util/coding.h"

namespace prefixd::store {

std::vector<bool> RecordStore::ContainsAll(std::span<const RecordId> ids) {
  std::vector<bool> out;
  out.reserve(ids.size());
  for (const RecordId& id : ids) out.push_back(Contains(id.key, id.kind));
  return out;
}

std::vector<Result<Record>> RecordStore::ReadAll(std::span<const RecordId> ids) {
  std::vector<Result<Record>> out;
  out.reserve(ids.size());
  for (const RecordId& id : ids) out.push_back(Read(id.key, id.kind));
  return out;
}

Result<OpenedRecord> RecordStore::OpenRecord(const Key&, RecordKind) {
  return Status::NotSupported("this store reads whole records only");
}

// The stored check covers payload_len (8 bytes, little-endian) then the payload.
bool PayloadMatches(const OpenedRecord& rec, uint32_t payload_crc) {
  uint8_t len[8];
  EncodeFixed64(len, rec.meta.payload_bytes);
  const uint32_t crc = Crc32cCombine(Crc32c(len, sizeof len), payload_crc, rec.meta.payload_bytes);
  return Crc32cMask(crc) == rec.trailer;
}

}  // namespace prefixd::store
