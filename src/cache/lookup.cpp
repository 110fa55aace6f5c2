// PrefixCache::Lookup: walk the verified chain, then pick the longest restorable P.
#include <algorithm>

#include "cache/cache_impl.h"

namespace prefixd::cache {
namespace {

using Match = PrefixCache::Match;
using RowSpan = PrefixCache::RowSpan;

bool SameTokens(std::span<const Token> a, std::span<const Token> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

// The stored Block or Tail under `node` that shares the most leading tokens with `rest`.
struct Partial {
  size_t n_tokens = 0;
  Node* child = nullptr;   // a Block that matches in part
  Entry* tail = nullptr;   // or a Tail
};

Partial BestPartial(const Node* node, std::span<const Token> rest) {
  Partial best;
  if (node == nullptr) return best;
  for (Node* c : node->children) {
    size_t n = CommonPrefix(c->tokens, rest);
    if (n > best.n_tokens) best = Partial{n, c, nullptr};
  }
  for (const auto& t : node->tails) {
    size_t n = CommonPrefix(t->tokens, rest);
    if (n > best.n_tokens) best = Partial{n, nullptr, t.get()};
  }
  return best;
}

// The longest Tail under `node` whose tokens all match `rest`.
Entry* LongestWholeTail(const Node* node, std::span<const Token> rest) {
  Entry* best = nullptr;
  for (const auto& t : node->tails) {
    if (t->tokens.size() <= rest.size() && SameTokens(t->tokens, rest.first(t->tokens.size())) &&
        (best == nullptr || t->tokens.size() > best->tokens.size())) {
      best = t.get();
    }
  }
  return best;
}

// Where P ends: the entries to hand out, so that they can be touched and copied.
struct Plan {
  size_t n_full_blocks = 0;   // rows of path[0, n) are used whole
  Entry* end_rows = nullptr;  // partial Block rows or Tail rows after them
  size_t end_rows_tokens = 0;
  Entry* end_snapshot = nullptr;  // Block-end Snapshot (payload) or Tail (snapshot)
  SnapshotKind kind = SnapshotKind::kBlockBoundary;
};

Plan PlanRows(const Walk& w, const Partial& partial) {
  Plan p;
  p.n_full_blocks = w.path.size();
  if (partial.child != nullptr) p.end_rows = partial.child->rows.get();
  if (partial.tail != nullptr) {
    p.end_rows = partial.tail;
    p.kind = partial.tail->kind;
  }
  p.end_rows_tokens = partial.n_tokens;
  return p;
}

Plan PlanSnapshot(const Walk& w, std::span<const Token> tokens, size_t limit, size_t block,
                  bool has_rows) {
  for (size_t j = w.path.size() + 1; j-- > 0;) {
    Node* n = j == 0 ? w.root : w.path[j - 1];
    if (n == nullptr) continue;
    size_t start = j * block;
    if (Entry* t = LongestWholeTail(n, tokens.subspan(start, limit - start))) {
      Plan p{j, has_rows ? t : nullptr, t->tokens.size(), t, t->kind};
      return p;
    }
    if (j > 0 && n->snapshot) return Plan{j, nullptr, 0, n->snapshot.get(), n->snapshot->kind};
  }
  return Plan{};
}

size_t PlanTokens(const Plan& p, size_t block) {
  if (p.end_snapshot == nullptr && p.end_rows == nullptr) return p.n_full_blocks * block;
  const Entry* end = p.end_snapshot != nullptr ? p.end_snapshot : p.end_rows;
  if (end->type == EntryType::kSnapshot) return p.n_full_blocks * block;
  return p.n_full_blocks * block + (p.end_snapshot != nullptr ? end->tokens.size()
                                                                : p.end_rows_tokens);
}

MissReason Reason(const Walk& w, const Match& m, size_t limit, size_t base, bool walked_all) {
  if (m.n_tokens == limit) return MissReason::kNone;
  if (w.verification_failed) return MissReason::kVerificationFailed;
  if (m.diverged_at > m.n_tokens) return MissReason::kNoSnapshot;
  if (m.diverged_at > base) return MissReason::kDiverged;
  if (w.next_evicted && !walked_all) return MissReason::kEvicted;
  const Node* cur = w.deepest();
  if (cur != nullptr && (!cur->children.empty() || !cur->tails.empty())) {
    return MissReason::kDiverged;
  }
  return MissReason::kNoEntry;
}

}  // namespace

Walk PrefixCache::Impl::WalkHashesLocked(const Digest& domain, std::span<const Token> tokens,
                                         std::span<const ChainHash> hashes) {
  Walk w;
  w.root = index.FindRoot(domain);
  Node* cur = w.root;
  size_t block = opts.block_size;
  for (size_t k = 0; k < hashes.size(); ++k) {
    Node* n = cur != nullptr ? index.Find(hashes[k]) : nullptr;
    if (n == nullptr) {
      w.next_evicted = evicted.Contains(hashes[k]);
      break;
    }
    if (n->parent != cur || !SameTokens(n->tokens, tokens.subspan(k * block, block))) {
      w.verification_failed = true;
      ++stats.verification_failures;
      break;
    }
    w.path.push_back(n);
    cur = n;
  }
  return w;
}

PrefixCache::Match PrefixCache::Impl::MatchLocked(const Walk& w, std::span<const Token> tokens,
                                                  size_t limit) {
  size_t block = opts.block_size;
  size_t base = w.path.size() * block;
  Partial partial = BestPartial(w.deepest(), tokens.subspan(base, limit - base));
  Plan plan = opts.needs_snapshot ? PlanSnapshot(w, tokens, limit, block, opts.has_rows)
                                  : PlanRows(w, partial);
  Match m;
  m.n_tokens = PlanTokens(plan, block);
  m.diverged_at = base + partial.n_tokens;
  m.n_blocks = w.path.size();
  if (!w.path.empty()) m.chain = w.path.back()->hash;
  m.kind = plan.kind;
  // Touch the end first, then the rows from the deepest up: parents stay more recent.
  if (plan.end_snapshot != nullptr) {
    index.Touch(plan.end_snapshot);
    m.snapshot = plan.end_snapshot->type == EntryType::kTail ? plan.end_snapshot->snapshot
                                                              : plan.end_snapshot->payload;
  }
  if (plan.end_rows != nullptr && plan.end_rows != plan.end_snapshot) index.Touch(plan.end_rows);
  if (opts.has_rows) {
    m.rows.reserve(plan.n_full_blocks + 1);
    for (size_t k = 0; k < plan.n_full_blocks; ++k) {
      m.rows.push_back({w.path[k]->rows->payload, block});
    }
    if (plan.end_rows != nullptr) m.rows.push_back({plan.end_rows->payload, plan.end_rows_tokens});
  }
  for (size_t k = plan.n_full_blocks; k-- > 0;) {
    if (w.path[k]->rows) index.Touch(w.path[k]->rows.get());
    index.TouchNode(w.path[k]);
  }
  bool walked_all = base + block > limit;
  m.reason = Reason(w, m, limit, base, walked_all);
  return m;
}

void PrefixCache::Impl::CountLookupLocked(const Match& m, size_t limit) {
  ++stats.lookups;
  stats.lookup_tokens += limit;
  size_t reason = static_cast<size_t>(m.reason);
  if (m.n_tokens == 0) {
    ++stats.misses[reason];
    return;
  }
  ++stats.hits;
  stats.hit_tokens += m.n_tokens;
  if (m.n_tokens < limit) ++stats.short_hits[reason];
}

PrefixCache::Match PrefixCache::Lookup(const Digest& domain, std::span<const Token> tokens,
                                       size_t max_len) {
  size_t limit = std::min(max_len, tokens.size());
  std::vector<ChainHash> hashes = impl_->HashChain(domain, tokens.first(limit));
  MutexLock lock(&impl_->mu);
  Walk w = impl_->WalkHashesLocked(domain, tokens, hashes);
  Match m = impl_->MatchLocked(w, tokens, limit);
  if (m.n_blocks == 0) m.chain = domain;
  impl_->CountLookupLocked(m, limit);
  return m;
}

}  // namespace prefixd::cache
