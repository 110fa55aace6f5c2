// Helpers shared by the store tests: temp dirs and records whose content is derived from a
// seed, so that any record read back can be checked against what must have been written.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "store/disk_store.h"

namespace prefixd::store::testing {

// A fresh directory under TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "prefixd-store-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
    EXPECT_FALSE(path_.empty());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A store in `dir` with `quota` bytes; `env` nullptr: the real file system.
inline Result<std::unique_ptr<DiskStore>> OpenStore(const std::string& dir, Env* env = nullptr,
                                                    uint64_t quota = 1 << 30) {
  DiskStore::Options o;
  o.dir = dir;
  o.quota_bytes = quota;
  o.env = env;
  return DiskStore::Open(o);
}

inline Digest DomainOf(int d) { return Sha256Of("domain-" + std::to_string(d)); }

// Payload bytes of record `seed`: a cheap deterministic pseudo-random stream.
inline std::vector<uint8_t> PayloadFor(uint32_t seed, size_t size) {
  std::vector<uint8_t> out(size);
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<uint8_t>(x);
  }
  return out;
}

// Record `seed`: position = seed, tokens and payload derived from it.
inline RecordMeta MetaFor(uint32_t seed, int domain = 0, RecordKind kind = RecordKind::kBlockRows,
                          size_t n_tokens = 16) {
  RecordMeta m;
  m.key = Sha256Of("record-" + std::to_string(seed));
  m.parent = Sha256Of("parent-" + std::to_string(seed));
  m.domain = DomainOf(domain);
  m.kind = kind;
  m.snapshot_kind = kind == RecordKind::kSnapshot ? 2 : 0;
  m.position = seed;
  for (size_t i = 0; i < n_tokens; ++i) m.tokens.push_back(static_cast<int32_t>(seed * 7 + i));
  return m;
}

inline std::shared_ptr<const std::vector<uint8_t>> PayloadPtr(uint32_t seed, size_t size) {
  return std::make_shared<const std::vector<uint8_t>>(PayloadFor(seed, size));
}

// Checks that every listed record reads back exactly as written (by its seed) and that
// nothing corrupt is served. Returns the number of records checked.
inline size_t ExpectAllIntact(DiskStore& store) {
  size_t n = 0;
  for (const RecordMeta& m : store.List()) {
    Result<Record> rec = store.Read(m.key, m.kind);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    if (!rec.ok()) continue;
    RecordMeta want = MetaFor(m.position, 0, m.kind, m.tokens.size());
    EXPECT_EQ(rec->meta.key, want.key);
    EXPECT_EQ(rec->meta.tokens, want.tokens);
    EXPECT_EQ(rec->meta.parent, want.parent);
    EXPECT_EQ(rec->payload, PayloadFor(m.position, m.payload_bytes));
    ++n;
  }
  return n;
}

}  // namespace prefixd::store::testing
