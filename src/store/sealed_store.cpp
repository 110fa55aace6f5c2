#include "store/sealed_store.h"

#include "util/coding.h"

namespace prefixd::store {

namespace {

// What binds a sealed payload to its place: every header field a reader trusts, except the
// times (created, last access), which the store may rewrite.
std::vector<uint8_t> IdentityOf(const RecordMeta& m) {
  std::vector<uint8_t> aad;
  aad.reserve(3 * 32 + 6);
  aad.insert(aad.end(), m.key.begin(), m.key.end());
  aad.insert(aad.end(), m.parent.begin(), m.parent.end());
  aad.insert(aad.end(), m.domain.begin(), m.domain.end());
  aad.push_back(uint8_t(m.kind));
  aad.push_back(m.snapshot_kind);
  PutFixed32(&aad, m.position);
  return aad;
}

}  // namespace

// The plaintext is the state, then the tokens, then their count (u32): the count is read from
// the end, so opening leaves the state where it was decrypted and only trims the rest.
Result<SealedRecord> SealRecord(const AeadKey& key, RecordMeta meta,
                                std::span<const uint8_t> payload) {
  if (meta.tokens.size() > kMaxTokensPerRecord) {
    return Status::InvalidArgument("a record of " + std::to_string(meta.tokens.size()) + " tokens");
  }
  std::vector<uint8_t> tokens;
  tokens.reserve(4 * meta.tokens.size() + 4);
  for (int32_t t : meta.tokens) PutFixed32(&tokens, uint32_t(t));
  PutFixed32(&tokens, uint32_t(meta.tokens.size()));
  meta.tokens.clear();
  meta.sealed = true;
  SealedRecord out;
  const std::span<const uint8_t> pieces[] = {payload, tokens};
  PREFIXD_RETURN_IF_ERROR(AeadSeal(key, IdentityOf(meta), pieces, &out.payload));
  meta.payload_bytes = out.payload.size();
  out.meta = std::move(meta);
  return out;
}

Result<Record> UnsealRecord(const AeadKey& key, const Record& sealed) {
  if (!sealed.meta.sealed) return Status::Corruption("a record that is not sealed");
  if (!sealed.meta.tokens.empty()) return Status::Corruption("a sealed record with clear tokens");
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> plain,
                           AeadOpen(key, IdentityOf(sealed.meta), sealed.payload));
  if (plain.size() < 4) return Status::Corruption("a sealed record without its token count");
  const uint32_t n = DecodeFixed32(plain.data() + plain.size() - 4);
  if (n > kMaxTokensPerRecord || plain.size() < 4 + 4 * size_t(n)) {
    return Status::Corruption("a sealed record's token count " + std::to_string(n) +
                              " does not fit its " + std::to_string(plain.size()) + " bytes");
  }
  const size_t state_bytes = plain.size() - 4 - 4 * size_t(n);
  Record out;
  out.meta = sealed.meta;
  out.meta.sealed = false;
  out.meta.tokens.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    out.meta.tokens[i] = int32_t(DecodeFixed32(plain.data() + state_bytes + 4 * i));
  }
  plain.resize(state_bytes);
  out.payload = std::move(plain);
  out.meta.payload_bytes = out.payload.size();
  return out;
}

bool SealedStore::PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) {
  auto sealed = SealRecord(key_, std::move(meta), *payload);
  if (!sealed.ok()) return false;
  auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(sealed->payload));
  return inner_.PutAsync(std::move(sealed->meta), std::move(bytes));
}

Result<Record> SealedStore::Read(const Key& key, RecordKind kind) {
  return Open({key, kind}, inner_.Read(key, kind));
}

std::vector<Result<Record>> SealedStore::ReadAll(std::span<const RecordId> ids) {
  std::vector<Result<Record>> recs = inner_.ReadAll(ids);
  for (size_t i = 0; i < recs.size(); ++i) recs[i] = Open(ids[i], std::move(recs[i]));
  return recs;
}

Result<Record> SealedStore::Open(const RecordId& id, Result<Record> read) {
  PREFIXD_ASSIGN_OR_RETURN(Record rec, std::move(read));
  auto open = UnsealRecord(key_, rec);
  if (!open.ok()) {
    ++refused_;
    inner_.ReportCorrupt(id.key, id.kind);  // never served: a plain record may have been planted
    return open.status();
  }
  return open;
}

Result<OpenedRecord> SealedStore::OpenRecord(const Key&, RecordKind) {
  return Status::NotSupported("a sealed record is opened whole (Read)");
}

}  // namespace prefixd::store
