// SealedStore: a RecordStore over another (the disk or the shared tier) that keeps what it
// stores unreadable and unforgeable without the key (`serve --encrypt-cache`): each record's
// tokens and payload are sealed with AES-256-GCM (util/aead.h) under a key derived from the
// server secret, the record's identity (key, parent, domain, kind, snapshot kind, position)
// bound in as associated data. The header in the clear says only where the record sits in its
// tree; `tokens` there is empty and the `sealed` flag set (docs/disk-format.md, "Sealed
// records").
//
// Fails closed: a record that is not sealed, or does not verify (another key, a changed byte,
// a record copied to another identity) is never returned: it is dropped through the inner
// store's ReportCorrupt and read as a miss. OpenRecord is NotSupported (a sealed payload must
// be opened whole before any byte is used), so readers take Read.
//
// Thread-safety: as the inner store; the key is immutable.
#pragma once

#include <atomic>

#include "store/record_store.h"
#include "util/aead.h"

namespace prefixd::store {

// The sealed form of a record: meta with tokens moved inside and `sealed` set, and the sealed
// payload (nonce || AES-256-GCM(payload, tokens, u32 n_tokens) || tag).
struct SealedRecord {
  RecordMeta meta;
  std::vector<uint8_t> payload;
};
Result<SealedRecord> SealRecord(const AeadKey& key, RecordMeta meta,
                                std::span<const uint8_t> payload);
// The record a sealed one holds (tokens back in meta, `sealed` cleared); Corruption when it is
// not sealed or does not verify under `key` for its header's identity.
Result<Record> UnsealRecord(const AeadKey& key, const Record& sealed);

class SealedStore final : public RecordStore {
 public:
  // REQUIRES: inner outlives this object.
  SealedStore(RecordStore& inner, const AeadKey& key) : inner_(inner), key_(key) {}

  bool PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) override;
  Result<Record> Read(const Key& key, RecordKind kind) override;
  bool Contains(const Key& key, RecordKind kind) override { return inner_.Contains(key, kind); }
  std::vector<Result<Record>> ReadAll(std::span<const RecordId> ids) override;
  std::vector<bool> ContainsAll(std::span<const RecordId> ids) override {
    return inner_.ContainsAll(ids);
  }
  Status Remove(const Key& key, RecordKind kind) override { return inner_.Remove(key, kind); }
  Result<OpenedRecord> OpenRecord(const Key& key, RecordKind kind) override;
  void ReportCorrupt(const Key& key, RecordKind kind) override { inner_.ReportCorrupt(key, kind); }

  // Records refused so far: not sealed, or not verifying.
  uint64_t refused() const { return refused_; }

 private:
  // What Read gives for a record the inner store read: opened, or refused and reported.
  Result<Record> Open(const RecordId& id, Result<Record> read);

  RecordStore& inner_;
  const AeadKey key_;
  std::atomic<uint64_t> refused_{0};
};

}  // namespace prefixd::store
