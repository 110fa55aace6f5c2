// PrefixCache: construction, inserts and the small public methods. Lookup is in lookup.cpp,
// eviction in eviction.cpp.
#include "cache/prefix_cache.h"

#include <algorithm>
#include <cassert>

#include "cache/cache_impl.h"

namespace prefixd::cache {

void EvictedMemory::Remember(const ChainHash& h) {
  if (capacity_ == 0 || !set_.insert(h).second) return;
  order_.push_back(h);
  if (order_.size() > capacity_) {
    set_.erase(order_.front());
    order_.pop_front();
  }
}

void EvictedMemory::Clear() {
  order_.clear();
  set_.clear();
}

PrefixCache::Impl::Impl(Options o)
    : opts(o), index(o.block_size), evicted(o.evicted_memory) {
  assert(opts.block_size > 0);
  assert(opts.has_rows || opts.needs_snapshot);
  if (!opts.has_rows) opts.needs_snapshot = true;  // a model without rows restores from state
  stats.ram_budget_bytes = opts.ram_budget_bytes;
  index.set_listener(opts.listener);
}

std::vector<ChainHash> PrefixCache::Impl::HashChain(const Digest& domain,
                                                     std::span<const Token> tokens) const {
  if (opts.chain_hash == nullptr) return ChainHashes(domain, tokens, opts.block_size);
  std::vector<ChainHash> out;
  ChainHash h = domain;
  for (size_t b = 0; b + opts.block_size <= tokens.size(); b += opts.block_size) {
    h = Hash(h, tokens.subspan(b, opts.block_size));
    out.push_back(h);
  }
  return out;
}

Node* PrefixCache::Impl::WalkTrieLocked(const Digest& domain, std::span<const Token> tokens,
                                        size_t depth, bool create) {
  Node* cur = create ? index.GetOrAddRoot(domain) : index.FindRoot(domain);
  size_t block = opts.block_size;
  for (size_t k = 0; k < depth && cur != nullptr; ++k) {
    std::span<const Token> b = tokens.subspan(k * block, block);
    Node* next = cur->FindChild(b);
    if (next == nullptr && create) {
      ChainHash h = Hash(cur->hash, b);
      if (index.Find(h) != nullptr) {
        ++stats.verification_failures;  // a collision: never build on it
        index.Prune(cur, nullptr, nullptr);
        return nullptr;
      }
      next = index.AddChild(cur, h, b);
      index.SetRows(next, nullptr);  // a placeholder: holds the chain, no memory
    }
    cur = next;
  }
  return cur;
}

InsertOutcome PrefixCache::Impl::CountInsertLocked(InsertOutcome o) {
  ++stats.inserts[static_cast<size_t>(o)];
  if (IsRefused(o)) ++stats.refused_inserts;
  return o;
}

InsertOutcome PrefixCache::Impl::AdmitLocked(size_t bytes, const Node* keep) {
  if (bytes > opts.ram_budget_bytes) return InsertOutcome::kRefusedTooLarge;
  if (!MakeRoomLocked(bytes, opts.ram_budget_bytes, keep)) return InsertOutcome::kRefusedNoRoom;
  return InsertOutcome::kInserted;
}

// Adds (or finds) the Block after *cur and moves *cur to it.
InsertOutcome PrefixCache::Impl::AddBlockLocked(Node** cur, std::span<const Token> block,
                                                PayloadRef rows) {
  if (Node* found = (*cur)->FindChild(block)) {
    *cur = found;
    return InsertOutcome::kAlreadyPresent;
  }
  ChainHash h = Hash((*cur)->hash, block);
  if (index.Find(h) != nullptr) {
    ++stats.verification_failures;
    return InsertOutcome::kRefusedConflict;
  }
  if (!opts.has_rows) rows = nullptr;
  InsertOutcome o = AdmitLocked(PayloadMemory(rows), *cur);
  if (o != InsertOutcome::kInserted) return o;
  Node* node = index.AddChild(*cur, h, block);
  index.SetRows(node, std::move(rows));  // null rows: a placeholder
  *cur = node;
  return InsertOutcome::kInserted;
}

InsertOutcome PrefixCache::Impl::AddSnapshotLocked(Node* node, SnapshotKind kind,
                                                   PayloadRef snapshot) {
  if (Entry* e = node->snapshot.get()) {
    e->kind = std::max(e->kind, kind);
    index.Touch(e);
    return InsertOutcome::kAlreadyPresent;
  }
  InsertOutcome o = AdmitLocked(PayloadMemory(snapshot), node);
  if (o != InsertOutcome::kInserted) return o;
  index.SetSnapshot(node, std::move(snapshot), kind);
  return o;
}

InsertOutcome PrefixCache::Impl::AddTailLocked(Node* node, std::span<const Token> tail,
                                               SnapshotKind kind, PayloadRef snapshot,
                                               PayloadRef tail_rows) {
  if (Entry* e = node->FindTail(tail)) {
    e->kind = std::max(e->kind, kind);
    index.Touch(e);
    return InsertOutcome::kAlreadyPresent;
  }
  InsertOutcome o = AdmitLocked(PayloadMemory(snapshot) + PayloadMemory(tail_rows), node);
  if (o != InsertOutcome::kInserted) return o;
  index.AddTail(node, tail, TailKey(node->hash, tail), std::move(tail_rows), std::move(snapshot),
                kind);
  return o;
}

PrefixCache::PrefixCache(Options opts) : impl_(std::make_unique<Impl>(opts)) {}
PrefixCache::~PrefixCache() = default;

const PrefixCache::Options& PrefixCache::options() const { return impl_->opts; }

InsertOutcome PrefixCache::InsertBlock(const Digest& domain, std::span<const Token> prefix_tokens,
                                       PayloadRef rows) {
  size_t block = impl_->opts.block_size;
  if (prefix_tokens.empty() || prefix_tokens.size() % block != 0) {
    MutexLock lock(&impl_->mu);
    return impl_->CountInsertLocked(InsertOutcome::kRefusedInvalid);
  }
  PayloadRef one[] = {std::move(rows)};
  return InsertBlocks(domain, prefix_tokens, prefix_tokens.size() / block - 1, one);
}

InsertOutcome PrefixCache::InsertBlocks(const Digest& domain, std::span<const Token> tokens,
                                        size_t first_block, std::span<const PayloadRef> rows) {
  Impl& s = *impl_;
  size_t block = s.opts.block_size;
  bool valid = !rows.empty() && (first_block + rows.size()) * block <= tokens.size() &&
               (!s.opts.has_rows || std::all_of(rows.begin(), rows.end(),
                                                [](const PayloadRef& r) { return r != nullptr; }));
  MutexLock lock(&s.mu);
  if (!valid) return s.CountInsertLocked(InsertOutcome::kRefusedInvalid);
  Node* cur = s.WalkTrieLocked(domain, tokens, first_block, /*create=*/!s.opts.has_rows ||
                                                                 first_block == 0);
  if (cur == nullptr) return s.CountInsertLocked(InsertOutcome::kRefusedNoParent);
  bool any_new = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::span<const Token> b = tokens.subspan((first_block + i) * block, block);
    InsertOutcome o = s.AddBlockLocked(&cur, b, rows[i]);
    if (IsRefused(o)) {
      s.index.Prune(cur, nullptr, nullptr);
      return s.CountInsertLocked(o);
    }
    s.CountInsertLocked(o);
    any_new |= o == InsertOutcome::kInserted;
  }
  return any_new ? InsertOutcome::kInserted : InsertOutcome::kAlreadyPresent;
}

InsertOutcome PrefixCache::InsertSnapshot(const Digest& domain,
                                          std::span<const Token> prefix_tokens, SnapshotKind kind,
                                          PayloadRef snapshot, PayloadRef tail_rows) {
  Impl& s = *impl_;
  size_t block = s.opts.block_size;
  size_t p = prefix_tokens.size();
  bool is_tail = p % block != 0;
  bool valid = p > 0 && (snapshot != nullptr) == s.opts.needs_snapshot &&
               (tail_rows != nullptr) == (s.opts.has_rows && is_tail);
  MutexLock lock(&s.mu);
  if (!valid) return s.CountInsertLocked(InsertOutcome::kRefusedInvalid);
  // Depth 0 needs only the domain root, which a Tail inside Block 0 may be the first to create.
  Node* node = s.WalkTrieLocked(domain, prefix_tokens, p / block,
                                !s.opts.has_rows || p / block == 0);
  if (node == nullptr) return s.CountInsertLocked(InsertOutcome::kRefusedNoParent);
  InsertOutcome o;
  if (is_tail) {
    o = s.AddTailLocked(node, prefix_tokens.subspan(p - p % block), kind, std::move(snapshot),
                        std::move(tail_rows));
  } else if (s.opts.needs_snapshot) {
    o = s.AddSnapshotLocked(node, kind, std::move(snapshot));
  } else {
    o = InsertOutcome::kAlreadyPresent;  // pure attention: the Block's rows are the state
  }
  if (IsRefused(o)) s.index.Prune(node, nullptr, nullptr);
  return s.CountInsertLocked(o);
}

size_t PrefixCache::Trim(size_t target_bytes) {
  MutexLock lock(&impl_->mu);
  impl_->MakeRoomLocked(0, target_bytes, nullptr);
  return impl_->index.bytes().total();
}

Stats PrefixCache::GetStats() const {
  MutexLock lock(&impl_->mu);
  Stats out = impl_->stats;
  out.ram = impl_->index.bytes();
  out.blocks = impl_->index.n_blocks();
  out.snapshots = impl_->index.n_snapshots();
  out.tails = impl_->index.n_tails();
  return out;
}

void PrefixCache::Clear() {
  MutexLock lock(&impl_->mu);
  impl_->index.Clear();
  impl_->evicted.Clear();
}

void PrefixCache::AnnounceBlocks(std::span<const BlockRef> held_below) const {
  MutexLock lock(&impl_->mu);
  impl_->index.Announce(held_below);
}

void PrefixCache::ReportAllRemoved() const {
  MutexLock lock(&impl_->mu);
  impl_->index.ReportAllRemoved();
}

Status PrefixCache::CheckConsistency() const {
  MutexLock lock(&impl_->mu);
  PREFIXD_RETURN_IF_ERROR(impl_->index.Check());
  if (impl_->index.bytes().total() > impl_->opts.ram_budget_bytes) {
    return Status::Internal("RAM tier holds more than its budget");
  }
  return Status::OK();
}

}  // namespace prefixd::cache
