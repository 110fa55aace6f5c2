#include "cache/store_tier.h"

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

StoreTier::StoreTier(store::RecordStore& store, PrefixCache& ram, store::RecordStore* copy_to)
    : store_(store), ram_(ram), copy_to_(copy_to), opts_(ram.options()) {}

void StoreTier::Put(RecordMeta meta, const PayloadRef& payload) {
  store_.PutAsync(std::move(meta), StoreBytes(payload ? payload : EmptyPayload()));
}

void StoreTier::SpillBlocks(const Digest& domain, std::span<const Token> tokens,
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

void StoreTier::SpillSnapshot(const Digest& domain, std::span<const Token> prefix,
                             SnapshotKind kind, const PayloadRef& snapshot,
                             const PayloadRef& tail_rows) {
  const size_t B = opts_.block_size, p = prefix.size(), k = p / B;
  if (kind == SnapshotKind::kBlockBoundary && p % B == 0 && k % kBoundaryEvery != 0) {
    return;  // the rows of this Block still go to the store
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

PayloadRef StoreTier::ReadVerified(const Digest& key, RecordKind kind,
                                  std::span<const Token> expected) {
  return Verified({key, kind}, store_.Read(key, kind), expected);
}

// A record the store read, used only when it is in the clear and holds `expected`.
PayloadRef StoreTier::Verified(const store::RecordId& id, Result<store::Record> rec,
                               std::span<const Token> expected) {
  const Digest& key = id.key;
  const RecordKind kind = id.kind;
  if (!rec.ok()) return nullptr;
  if (rec->meta.sealed) {  // sealed under a key this server was not given: unusable here
    store_.Remove(key, kind);
    return nullptr;
  }
  if (!std::equal(rec->meta.tokens.begin(), rec->meta.tokens.end(), expected.begin(),
                  expected.end())) {
    store_.Remove(key, kind);  // a hash match with other tokens: never served
    return nullptr;
  }
  auto p = std::make_shared<Payload>();
  p->bytes = std::move(rec->payload);
  if (copy_to_ != nullptr) copy_to_->PutAsync(std::move(rec->meta), StoreBytes(p));
  return p;
}

// A restore end P in (ram.n_tokens, max_len] the store holds: a Tail after Block k (longest
// first) or the end of Block k.
struct StoreTier::Walk {
  size_t end = 0;
  Digest key{};
  bool is_tail = false;
};

// Blocks from[, ...) whose rows the store holds without a gap: the Blocks reachable below RAM.
size_t StoreTier::ReachableBlocks(const std::vector<ChainHash>& chain, size_t from) {
  std::vector<store::RecordId> ids;
  for (size_t k = from; k < chain.size(); ++k) ids.push_back({chain[k], RecordKind::kBlockRows});
  const std::vector<bool> have = store_.ContainsAll(ids);
  size_t n = from;
  while (n - from < have.size() && have[n - from]) ++n;
  return n;
}

// The longest restore end the store holds at Block level k, asked in one ContainsAll.
StoreTier::Walk StoreTier::FindAtLevel(const Digest& domain, std::span<const Token> tokens,
                                       const std::vector<ChainHash>& chain, size_t k,
                                       size_t max_len, size_t ram_tokens) {
  const size_t B = opts_.block_size, base = k * B;
  if (base > max_len || base + B <= ram_tokens) return {};
  const Digest parent = k == 0 ? domain : chain[k - 1];
  std::vector<Walk> candidates;
  for (size_t len = std::min(B - 1, max_len - base); len > 0 && base + len > ram_tokens; --len) {
    candidates.push_back({base + len, TailKey(parent, tokens.subspan(base, len)), true});
  }
  if (k > 0 && base > ram_tokens) candidates.push_back({base, chain[k - 1], false});
  std::vector<store::RecordId> ids;
  for (const Walk& c : candidates) {
    if (c.is_tail && opts_.has_rows) ids.push_back({c.key, RecordKind::kTail});
    if (opts_.needs_snapshot) ids.push_back({c.key, RecordKind::kSnapshot});
  }
  const std::vector<bool> have = store_.ContainsAll(ids);
  size_t i = 0;
  for (const Walk& c : candidates) {
    bool whole = true;
    if (c.is_tail && opts_.has_rows) whole = have[i++] && whole;
    if (opts_.needs_snapshot) whole = have[i++] && whole;
    if (whole) return c;
  }
  return {};
}

// The longest restore end past `ram_tokens` over the Blocks the store holds from `from_block`.
StoreTier::Walk StoreTier::FindLongest(const Digest& domain, std::span<const Token> tokens,
                                       const std::vector<ChainHash>& chain, size_t from_block,
                                       size_t max_len, size_t ram_tokens) {
  const size_t n_blocks = ReachableBlocks(chain, from_block);
  Walk best;
  for (size_t k = n_blocks + 1; k-- > 0 && best.end == 0;) {
    best = FindAtLevel(domain, tokens, chain, k, max_len, ram_tokens);
  }
  return best;
}

size_t StoreTier::Promote(const Digest& domain, std::span<const Token> tokens, size_t max_len,
                          const PrefixCache::Match& ram) {
  const std::vector<ChainHash> chain = ChainHashes(domain, tokens, opts_.block_size);
  const Walk best = FindLongest(domain, tokens, chain, ram.n_blocks, max_len, ram.n_tokens);
  if (best.end <= ram.n_tokens) return 0;
  return Load(domain, tokens, chain, ram.n_blocks, best) ? best.end : 0;
}

std::optional<store::OpenedRecord> StoreTier::OpenVerified(const Digest& key,
                                                           store::RecordKind kind,
                                                           std::span<const Token> expected) {
  auto rec = store_.OpenRecord(key, kind);
  if (!rec.ok()) return std::nullopt;
  if (rec->meta.sealed) {  // as in ReadVerified
    store_.Remove(key, kind);
    return std::nullopt;
  }
  if (!std::equal(rec->meta.tokens.begin(), rec->meta.tokens.end(), expected.begin(),
                  expected.end())) {
    store_.Remove(key, kind);  // a hash match with other tokens: never served
    return std::nullopt;
  }
  return std::move(*rec);
}

std::optional<OpenedPrefix> StoreTier::Open(const Digest& domain, std::span<const Token> tokens,
                                            size_t max_len, size_t beyond) {
  if (!opts_.has_rows) return std::nullopt;
  const std::vector<ChainHash> chain = ChainHashes(domain, tokens, opts_.block_size);
  const Walk best = FindLongest(domain, tokens, chain, 0, max_len, beyond);
  if (best.end <= beyond) return std::nullopt;
  const size_t B = opts_.block_size, last = best.end / B;
  OpenedPrefix out;
  out.n_tokens = best.end;
  for (size_t k = 0; k < last; ++k) {
    auto r = OpenVerified(chain[k], RecordKind::kBlockRows, tokens.subspan(k * B, B));
    if (!r) return std::nullopt;
    out.rows.push_back({std::move(*r), B});
  }
  if (best.is_tail) {
    auto t = OpenVerified(best.key, RecordKind::kTail, tokens.subspan(last * B, best.end - last * B));
    if (!t) return std::nullopt;
    out.rows.push_back({std::move(*t), best.end - last * B});
  }
  if (opts_.needs_snapshot) {
    out.snapshot = ReadVerified(best.key, RecordKind::kSnapshot, {});
    if (!out.snapshot) return std::nullopt;
  }
  return out;
}

// Reads and verifies Blocks [first, best.end / B) and the Snapshot / Tail at best.end, and
// inserts them into RAM, Blocks first.
// Every record of the restore is read in one ReadAll (one round trip to a remote store): the
// Blocks' rows from `first`, then the Snapshot and the Tail that end it.
bool StoreTier::Load(const Digest& domain, std::span<const Token> tokens,
                    const std::vector<ChainHash>& chain, size_t first, const Walk& best) {
  const size_t B = opts_.block_size, last = best.end / B;
  std::vector<store::RecordId> ids;
  std::vector<std::span<const Token>> expected;
  for (size_t k = first; k < last; ++k) {
    ids.push_back({chain[k], RecordKind::kBlockRows});
    expected.push_back(tokens.subspan(k * B, B));
  }
  const bool with_tail = best.is_tail && opts_.has_rows;
  if (opts_.needs_snapshot) ids.push_back({best.key, RecordKind::kSnapshot}), expected.push_back({});
  if (with_tail) {
    ids.push_back({best.key, RecordKind::kTail});
    expected.push_back(tokens.subspan(last * B, best.end - last * B));
  }
  std::vector<Result<store::Record>> recs = store_.ReadAll(ids);
  const size_t n_rows = last - first;
  std::vector<PayloadRef> rows;
  for (size_t i = 0; i < n_rows; ++i) {
    PayloadRef r = Verified(ids[i], std::move(recs[i]), expected[i]);
    if (!r) return false;
    rows.push_back(opts_.has_rows ? r : nullptr);
  }
  if (!rows.empty() && IsRefused(ram_.InsertBlocks(domain, tokens, first, rows))) return false;
  size_t i = n_rows;
  PayloadRef snapshot, tail_rows;
  if (opts_.needs_snapshot) {
    snapshot = Verified(ids[i], std::move(recs[i]), expected[i]);
    if (!snapshot) return false;
    ++i;
  }
  if (with_tail) {
    tail_rows = Verified(ids[i], std::move(recs[i]), expected[i]);
    if (!tail_rows) return false;
  }
  if (!snapshot && !tail_rows) return true;
  return !IsRefused(ram_.InsertSnapshot(domain, tokens.first(best.end), SnapshotKind::kMessage,
                                        snapshot, tail_rows));
}

}  // namespace prefixd::cache
