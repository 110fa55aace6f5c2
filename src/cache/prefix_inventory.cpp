// Listing and evicting whole prefix trees (prefix_inventory.h): PrefixCache's side walks the
// trie under the lock; the disk side groups the store's records by following their parents.
#include <algorithm>
#include <unordered_map>

#include "cache/cache_impl.h"
#include "cache/prefix_inventory.h"

namespace prefixd::cache {
namespace {

void AddEntry(const Entry& e, size_t block_size, PrefixSummary* s) {
  s->n_tokens = std::max<uint64_t>(s->n_tokens, e.End(block_size));
  s->bytes += e.bytes;
  if (s->created_unix_ms == 0 || e.created_unix_ms < s->created_unix_ms) {
    s->created_unix_ms = e.created_unix_ms;
  }
  s->used_unix_ms = std::max(s->used_unix_ms, e.used_unix_ms);
  if (e.type == EntryType::kRows) ++s->blocks;
  if (e.type == EntryType::kSnapshot) ++s->snapshots;
  if (e.type == EntryType::kTail) ++s->tails;
}

void SummarizeTree(const Node& n, size_t block_size, PrefixSummary* s) {
  if (n.rows) AddEntry(*n.rows, block_size, s);
  if (n.snapshot) AddEntry(*n.snapshot, block_size, s);
  for (const auto& t : n.tails) AddEntry(*t, block_size, s);
  for (const Node* c : n.children) SummarizeTree(*c, block_size, s);
}

// The entries of the tree below `n`, each after everything that depends on it.
void CollectLeavesFirst(Node& n, std::vector<Entry*>* out) {
  for (Node* c : n.children) CollectLeavesFirst(*c, out);
  for (auto& t : n.tails) out->push_back(t.get());
  if (n.snapshot) out->push_back(n.snapshot.get());
  if (n.rows) out->push_back(n.rows.get());
}

// The prefix tree root of each record of a listing, memoized along the way.
class RecordRoots {
 public:
  explicit RecordRoots(const std::vector<store::RecordMeta>& records) {
    for (const store::RecordMeta& m : records) {
      if (m.kind != store::RecordKind::kSnapshot) parent_[m.key] = m.parent;
    }
  }
  ChainHash RootOf(const store::RecordMeta& m);

 private:
  std::unordered_map<ChainHash, ChainHash, DigestHash> parent_;
  std::unordered_map<ChainHash, ChainHash, DigestHash> root_;
};

ChainHash RecordRoots::RootOf(const store::RecordMeta& m) {
  ChainHash key = m.key, parent = m.parent;
  std::vector<ChainHash> path;
  while (parent != m.domain) {
    if (auto r = root_.find(key); r != root_.end()) {
      key = r->second;
      break;
    }
    path.push_back(key);
    key = parent;
    auto p = parent_.find(parent);
    if (p == parent_.end()) break;  // an orphan (its parent was evicted): a tree of its own
    parent = p->second;
  }
  for (const ChainHash& h : path) root_[h] = key;
  return key;
}

}  // namespace

std::vector<PrefixSummary> PrefixCache::ListPrefixes() const {
  MutexLock lock(&impl_->mu);
  std::vector<PrefixSummary> out;
  const size_t block = impl_->opts.block_size;
  impl_->index.ForEachRoot([&](const Node& root) {
    for (const Node* first : root.children) {
      PrefixSummary s{root.hash, first->hash};
      SummarizeTree(*first, block, &s);
      out.push_back(s);
    }
    for (const auto& t : root.tails) {
      PrefixSummary s{root.hash, t->tail_key};
      AddEntry(*t, block, &s);
      out.push_back(s);
    }
  });
  return out;
}

size_t PrefixCache::EvictPrefix(const Digest& domain, const ChainHash& root) {
  MutexLock lock(&impl_->mu);
  Node* top = impl_->index.FindRoot(domain);
  if (top == nullptr) return 0;
  std::vector<Entry*> victims;
  for (Node* first : top->children) {
    if (first->hash == root) CollectLeavesFirst(*first, &victims);
  }
  for (auto& t : top->tails) {
    if (t->tail_key == root) victims.push_back(t.get());
  }
  // Leaves first: each entry is listed once what depended on it is gone. A pinned entry stays,
  // and with it the Blocks above it (never listed), so no pointer here is used after its node
  // is pruned.
  size_t evicted = 0;
  for (Entry* e : victims) {
    if (!e->listed || e->Pinned()) continue;
    impl_->EvictLocked(e, nullptr);
    ++evicted;
  }
  return evicted;
}

std::vector<PrefixSummary> ListStorePrefixes(store::DiskStore& store, size_t block_size) {
  std::vector<store::RecordMeta> records = store.List();
  // An image's embeddings belong to no prefix tree.
  std::erase_if(records, [](const store::RecordMeta& m) {
    return m.kind == store::RecordKind::kEmbeddings;
  });
  std::vector<PrefixSummary> out;
  std::unordered_map<ChainHash, size_t, DigestHash> by_root;
  RecordRoots roots(records);
  for (const store::RecordMeta& m : records) {
    const ChainHash root = roots.RootOf(m);
    auto [it, fresh] = by_root.emplace(root, out.size());
    if (fresh) out.push_back(PrefixSummary{m.domain, root});
    PrefixSummary& s = out[it->second];
    s.n_tokens = std::max<uint64_t>(s.n_tokens, m.position);
    s.bytes += store::RecordFileBytes(m);
    s.used_unix_ms = std::max(s.used_unix_ms, m.last_access_unix_ms);
    if (m.kind == store::RecordKind::kBlockRows) ++s.blocks;
    if (m.kind == store::RecordKind::kTail || m.position % block_size != 0) {
      ++s.tails;
    } else if (m.kind == store::RecordKind::kSnapshot) {
      ++s.snapshots;
    }
  }
  return out;
}

size_t RemoveStorePrefix(store::DiskStore& store, const Digest& domain, const ChainHash& root) {
  std::vector<store::RecordMeta> records = store.List(domain);
  RecordRoots roots(records);
  size_t removed = 0;
  for (const store::RecordMeta& m : records) {
    if (roots.RootOf(m) != root) continue;
    if (store.Remove(m.key, m.kind).ok()) ++removed;
  }
  return removed;
}

}  // namespace prefixd::cache
