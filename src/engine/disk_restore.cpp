#include "engine/disk_restore.h"

#include <sys/mman.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/codec/snapshot_payload.h"
#include "util/hash.h"
#include "util/log.h"

namespace prefixd::engine {

namespace {

// Address space the size of a payload left in its file, with the payload's front read into
// it; the rest is never touched (anonymous pages cost nothing until written).
class StandIn {
 public:
  static Result<StandIn> Read(const store::OpenedRecord& rec) {
    const uint64_t n = rec.meta.payload_bytes;
    uint8_t head[kRowsHeadBytes];
    if (n < sizeof head) return Status::Corruption("rows payload shorter than its header");
    PREFIXD_RETURN_IF_ERROR(ReadExactly(rec, 0, sizeof head, head));
    PREFIXD_ASSIGN_OR_RETURN(uint64_t front, RowsFrontBytes(head));
    if (front > n) return Status::Corruption("rows payload shorter than its front");
    void* p = ::mmap(nullptr, size_t(n), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Status::ResourceExhausted("no address space for a stand-in");
    StandIn s(static_cast<uint8_t*>(p), size_t(n), size_t(front));
    PREFIXD_RETURN_IF_ERROR(ReadExactly(rec, 0, s.front_, s.base_));
    return s;
  }

  StandIn(StandIn&& o) noexcept : base_(o.base_), size_(o.size_), front_(o.front_) {
    o.base_ = nullptr;
  }
  StandIn& operator=(StandIn&&) = delete;
  ~StandIn() {
    if (base_) ::munmap(base_, size_);
  }

  std::span<const uint8_t> bytes() const { return {base_, size_}; }
  size_t front() const { return front_; }

 private:
  StandIn(uint8_t* base, size_t size, size_t front) : base_(base), size_(size), front_(front) {}

  static Status ReadExactly(const store::OpenedRecord& rec, uint64_t at, size_t n, uint8_t* dst) {
    PREFIXD_ASSIGN_OR_RETURN(size_t got, rec.file->Read(rec.payload_offset + at, n, dst));
    if (got != n) return Status::Corruption("record file shorter than its payload");
    return Status::OK();
  }

  uint8_t* base_;
  size_t size_;
  size_t front_;
};

// Reads each record's payload once more, only to find the damaged ones after a restore failed
// before its checksums could say which; they are reported to the cache.
void QuarantineDamaged(std::span<const cache::OpenedPrefix::Rows> rows, cache::TieredCache& cache) {
  std::vector<uint8_t> slice(size_t(1) << 20);
  for (const auto& r : rows) {
    const store::OpenedRecord& rec = r.record;
    uint32_t crc = 0;
    bool readable = true;
    for (uint64_t at = 0; at < rec.meta.payload_bytes && readable;) {
      const size_t k = size_t(std::min<uint64_t>(slice.size(), rec.meta.payload_bytes - at));
      Result<size_t> got = rec.file->Read(rec.payload_offset + at, k, slice.data());
      readable = got.ok() && *got == k;
      if (readable) crc = Crc32cCombine(crc, Crc32c(slice.data(), k), k);
      at += k;
    }
    if (readable && !store::PayloadMatches(rec, crc)) cache.ReportCorrupt(rec.meta);
  }
}

}  // namespace

Status SetOpenedPrefix(Context& ctx, int32_t seq, const cache::OpenedPrefix& opened, size_t p,
                       const StateShape& shape, cache::TieredCache& cache, StatePieces* pieces,
                       size_t* restored_bytes) {
  *restored_bytes = 0;
  std::vector<StandIn> stand_ins;
  std::vector<RowsRef> rows;
  std::vector<FileBackedPayload> files;
  size_t left = p;
  for (size_t i = 0; i < opened.rows.size() && left > 0; ++i) {
    const auto& r = opened.rows[i];
    Result<StandIn> s = StandIn::Read(r.record);
    if (!s.ok()) {
      if (s.status().IsCorruption()) cache.ReportCorrupt(r.record.meta);
      return s.status();
    }
    const size_t use = std::min(r.n_tokens, left);
    left -= use;
    rows.push_back({s->bytes(), uint32_t(use)});
    files.push_back({s->bytes(), s->front(), r.record.file.get(), r.record.payload_offset});
    stand_ins.push_back(std::move(*s));
  }
  if (left > 0) return Status::Internal("opened prefix shorter than its length");
  const std::span<const cache::OpenedPrefix::Rows> used(opened.rows.data(), files.size());
  SnapshotParts snap;
  if (opened.snapshot) {
    PREFIXD_ASSIGN_OR_RETURN(snap, SplitSnapshot(opened.snapshot->bytes));
  }
  Status st = AssembleStatePieces(rows, snap.state, shape, int32_t(p), pieces);
  std::vector<uint32_t> crcs(files.size());
  if (st.ok()) st = ctx.SetStatePieces(seq, pieces->pieces, pieces->size, files, crcs, snap.layout);
  if (!st.ok()) {
    QuarantineDamaged(used, cache);
    return st;
  }
  *restored_bytes = pieces->size;
  size_t damaged = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (store::PayloadMatches(used[i].record, crcs[i])) continue;
    cache.ReportCorrupt(used[i].record.meta);
    ++damaged;
  }
  if (damaged > 0) {
    ctx.SeqClear(seq);
    return Status::Corruption(std::to_string(damaged) + " of " + std::to_string(files.size()) +
                              " disk records: payload checksum mismatch where the rows landed");
  }
  return Status::OK();
}

}  // namespace prefixd::engine
