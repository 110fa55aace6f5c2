#include "cache/tiered_cache.h"

#include <algorithm>

namespace prefixd::cache {

TieredCache::TieredCache(PrefixCache& ram, Lower lower) : ram_(ram) {
  if (lower.disk) disk_ = std::make_unique<StoreTier>(*lower.disk, ram);
  // What the shared tier gives is kept on disk too: the next restart finds it locally.
  if (lower.remote) remote_ = std::make_unique<StoreTier>(*lower.remote, ram, lower.disk);
}

bool TieredCache::Deepen(StoreTier& tier, const Digest& domain, std::span<const Token> tokens,
                         size_t max_len, size_t floor, PrefixCache::Match* m, size_t* offered) {
  *offered = tier.Promote(domain, tokens, max_len, *m);
  if (*offered <= std::max(floor, m->n_tokens)) return false;
  const size_t diverged = m->diverged_at;
  *m = ram_.Lookup(domain, tokens, max_len);
  m->diverged_at = std::max(m->diverged_at, diverged);
  return true;
}

TieredCache::Found TieredCache::Lookup(const Digest& domain, std::span<const Token> tokens,
                                       size_t max_len, size_t good_enough, Reach reach) {
  Found f;
  f.match = ram_.Lookup(domain, tokens, max_len);
  size_t offered = 0;
  auto short_of = [&] { return std::max(f.match.n_tokens, good_enough) < max_len; };
  if (reach == Reach::kRam) return f;
  if (disk_ && short_of() &&
      Deepen(*disk_, domain, tokens, max_len, good_enough, &f.match, &offered)) {
    f.tier = Tier::kDisk;
  }
  if (remote_ && reach == Reach::kAll && short_of() &&
      Deepen(*remote_, domain, tokens, max_len, good_enough, &f.match, &offered)) {
    f.tier = Tier::kRemote;
  }
  return f;
}

TieredCache::Promoted TieredCache::Promote(const Digest& domain, std::span<const Token> tokens,
                                           size_t max_len, bool open_disk) {
  Promoted p;
  PrefixCache::Match m = ram_.Lookup(domain, tokens, max_len);
  p.ram = m.n_tokens;
  if (disk_ && m.n_tokens < max_len && open_disk && !remote_) {
    // Only a longer prefix than RAM's is opened: a Snapshot read to be dropped costs its bytes.
    std::optional<OpenedPrefix> o = disk_->Open(domain, tokens, max_len, m.n_tokens);
    if (o) {
      p.disk = o->n_tokens;
      p.opened = std::make_shared<const OpenedPrefix>(std::move(*o));
      return p;
    }
  }
  if (disk_ && m.n_tokens < max_len) Deepen(*disk_, domain, tokens, max_len, 0, &m, &p.disk);
  if (remote_ && m.n_tokens < max_len) Deepen(*remote_, domain, tokens, max_len, 0, &m, &p.remote);
  return p;
}

void TieredCache::ReportCorrupt(const store::RecordMeta& meta) {
  if (disk_) disk_->ReportCorrupt(meta);
}

void TieredCache::InsertBlocks(const Digest& domain, std::span<const Token> tokens,
                               size_t first_block, std::span<const PayloadRef> rows) {
  ram_.InsertBlocks(domain, tokens, first_block, rows);
  if (disk_) disk_->SpillBlocks(domain, tokens, first_block, rows);
  if (remote_) remote_->SpillBlocks(domain, tokens, first_block, rows);
}

void TieredCache::InsertSnapshot(const Digest& domain, std::span<const Token> prefix,
                                 SnapshotKind kind, const PayloadRef& snapshot,
                                 const PayloadRef& tail_rows) {
  ram_.InsertSnapshot(domain, prefix, kind, snapshot, tail_rows);
  if (disk_) disk_->SpillSnapshot(domain, prefix, kind, snapshot, tail_rows);
  if (remote_) remote_->SpillSnapshot(domain, prefix, kind, snapshot, tail_rows);
}

}  // namespace prefixd::cache
