#include "cache/disk_tier.h"

#include <algorithm>

#include "cache/chain_hash.h"

namespace prefixd::cache {

using store::RecordKind;
using store::RecordMeta;

namespace {

const PayloadRef& EmptyPayload() {
  static const PayloadRef empty = std::make_shared<Payload>();
  return empty;
}

std::shared_ptr<const std::vector<uint8_t>> StoreBytes(const PayloadRef& p) {
  return std::shared_ptr<const std::vector<uint8_t>>(p, &p->bytes);  // shares ownership
}

}  // namespace

DiskTier::DiskTier(store::DiskStore& store, PrefixCache& ram)
    : store_(store), ram_(ram), opts_(ram.options()) {}

void DiskTier::Put(RecordMeta meta, const PayloadRef& payload) {
  store_.PutAsync(std::move(meta), StoreBytes(payload ? payload : EmptyPayload()));
}

void DiskTier::SpillBlocks(const Digest& domain, std::span<const Token> tokens,
                           size_t first_block, std::span<const PayloadRef> rows) {
  const size_t B = opts_.block_size;
  std::vector<ChainHash> chain = ChainHashes(domain, tokens.first((first_block + rows.size()) * B), B);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t k = first_block + i;
    RecordMeta m;
    m.key = chain[k];
    m.parent = k == 0 ? domain : chain[k - 1];
    m.domain = domain;
    m.kind = RecordKind::kBlockRows;
    m.position = uint32_t((k + 1) * B);
    auto b = tokens.subspan(k * B, B);
    m.tokens.assign(b.begin(), b.end());
    Put(std::move(m), opts_.has_rows ? rows[i] : nullptr);
  }
}

void DiskTier::SpillSnapshot(const Digest& domain, std::span<const Token> prefix,
                             SnapshotKind kind, const PayloadRef& snapshot,
                             const PayloadRef& tail_rows) {
  const size_t B = opts_.block_size, p = prefix.size(), k = p / B;
  if (kind == SnapshotKind::kBlockBoundary && p % B == 0 && k % kDiskBoundaryEvery != 0) {
    return;  // the rows of this Block still go to disk
  }
  std::vector<ChainHash> chain = ChainHashes(domain, prefix.first(k * B), B);
  const ChainHash parent = k == 0 ? domain : chain[k - 1];
  RecordMeta m;
  m.domain = domain;
  m.snapshot_kind = uint8_t(kind);
  m.position = uint32_t(p);
  if (p % B != 0) {
    auto tail = prefix.subspan(k * B);
    m.key = TailKey(parent, tail);
    m.parent = parent;
    m.tokens.assign(tail.begin(), tail.end());
    m.kind = RecordKind::kTail;
    Put(m, tail_rows);
  } else {
    m.key = parent;
    m.parent = k <= 1 ? domain : chain[k - 2];
  }
  if (snapshot) {
    m.kind = RecordKind::kSnapshot;
    m.tokens.clear();
    Put(std::move(m), snapshot);
  }
}

PayloadRef DiskTier::ReadVerified(const Digest& key, RecordKind kind,
                                  std::span<const Token> expected) {
  auto rec = store_.Read(key, kind);
  if (!rec.ok()) return nullptr;
  if (!std::equal(rec->meta.tokens.begin(), rec->meta.tokens.end(), expected.begin(),
                  expected.end())) {
    store_.Remove(key, kind);  // a hash match with other tokens: never served
    return nullptr;
  }
  auto p = std::make_shared<Payload>();
  p->bytes = std::move(rec->payload);
  return p;
}

// The longest restore end P in (ram.n_tokens, max_len] the disk holds, searched from the
// deepest reachable Block down: Tails after Block k (longest first), then the end of Block k.
struct DiskTier::Walk {
  size_t end = 0;
  Digest key{};
  bool is_tail = false;
};

size_t DiskTier::Promote(const Digest& domain, std::span<const Token> tokens, size_t max_len,
                         const PrefixCache::Match& ram) {
  const size_t B = opts_.block_size;
  const std::vector<ChainHash> chain = ChainHashes(domain, tokens, B);
  size_t n_blocks = ram.n_blocks;  // Blocks reachable in RAM, then on disk (index only)
  while (n_blocks < chain.size() && store_.Contains(chain[n_blocks], RecordKind::kBlockRows)) {
    ++n_blocks;
  }
  auto parent_of = [&](size_t k) { return k == 0 ? domain : chain[k - 1]; };
  Walk best;
  for (size_t k = n_blocks + 1; k-- > 0 && best.end == 0;) {
    const size_t base = k * B;
    if (base + 1 > max_len + 1 || base + B <= ram.n_tokens) continue;
    for (size_t len = std::min(B - 1, max_len - base); len > 0 && base + len > ram.n_tokens; --len) {
      Digest key = TailKey(parent_of(k), tokens.subspan(base, len));
      if ((!opts_.has_rows || store_.Contains(key, RecordKind::kTail)) &&
          (!opts_.needs_snapshot || store_.Contains(key, RecordKind::kSnapshot))) {
        best = {base + len, key, true};
        break;
      }
    }
    if (best.end == 0 && k > 0 && base > ram.n_tokens &&
        (!opts_.needs_snapshot || store_.Contains(chain[k - 1], RecordKind::kSnapshot))) {
      best = {base, chain[k - 1], false};
    }
  }
  if (best.end <= ram.n_tokens) return 0;
  return Load(domain, tokens, chain, ram.n_blocks, best) ? best.end : 0;
}

// Reads and verifies Blocks [first, best.end / B) and the Snapshot / Tail at best.end, and
// inserts them into RAM, Blocks first.
bool DiskTier::Load(const Digest& domain, std::span<const Token> tokens,
                    const std::vector<ChainHash>& chain, size_t first, const Walk& best) {
  const size_t B = opts_.block_size, last = best.end / B;
  std::vector<PayloadRef> rows;
  for (size_t k = first; k < last; ++k) {
    PayloadRef r = ReadVerified(chain[k], RecordKind::kBlockRows, tokens.subspan(k * B, B));
    if (!r) return false;
    rows.push_back(opts_.has_rows ? r : nullptr);
  }
  if (!rows.empty() && IsRefused(ram_.InsertBlocks(domain, tokens, first, rows))) return false;
  rows.clear();
  PayloadRef snapshot, tail_rows;
  if (opts_.needs_snapshot) {
    snapshot = ReadVerified(best.key, RecordKind::kSnapshot, {});
    if (!snapshot) return false;
  }
  if (best.is_tail && opts_.has_rows) {
    tail_rows = ReadVerified(best.key, RecordKind::kTail,
                             tokens.subspan(last * B, best.end - last * B));
    if (!tail_rows) return false;
  }
  if (!snapshot && !tail_rows) return true;
  return !IsRefused(ram_.InsertSnapshot(domain, tokens.first(best.end), SnapshotKind::kMessage,
                                        snapshot, tail_rows));
}

}  // namespace prefixd::cache
