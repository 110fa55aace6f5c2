// Eviction: least recently used first among entries nothing depends on; a Snapshot or Tail
// victim first lets the retention policy thin a boundary Snapshot of its chain.
#include <algorithm>

#include "cache/cache_impl.h"
#include "cache/retention.h"

namespace prefixd::cache {
namespace {

// The chain through `node`: its ancestors, then down through the most recently used child.
std::vector<const Node*> ChainThrough(const Node* node) {
  std::vector<const Node*> chain;
  for (const Node* n = node; n != nullptr; n = n->parent) chain.push_back(n);
  std::reverse(chain.begin(), chain.end());
  for (const Node* n = node; !n->children.empty();) {
    n = *std::max_element(n->children.begin(), n->children.end(),
                          [](const Node* a, const Node* b) { return a->last_use < b->last_use; });
    chain.push_back(n);
  }
  return chain;
}

}  // namespace

Entry* PrefixCache::Impl::PickThinningLocked(Entry* victim) const {
  size_t block = opts.block_size;
  std::vector<SnapshotPoint> points;
  std::vector<Entry*> entries;
  auto add = [&](Entry* e) {
    points.push_back({e->End(block), e->kind});
    entries.push_back(e);
  };
  size_t newest = 0;
  for (const Node* n : ChainThrough(victim->node)) {
    newest = std::max(newest, n->depth * block);
    if (n->snapshot) add(n->snapshot.get());
    for (const auto& t : n->tails) add(t.get());
  }
  for (const SnapshotPoint& p : points) newest = std::max(newest, p.position);
  RetentionOptions ro{block, opts.dense_blocks};
  for (size_t i : BoundaryDropOrder(points, newest, ro)) {
    if (!entries[i]->Pinned()) return entries[i];
  }
  return nullptr;
}

void PrefixCache::Impl::EvictLocked(Entry* victim, const Node* keep) {
  ++stats.evictions;
  stats.evicted_bytes += victim->bytes;
  std::vector<ChainHash> removed;
  index.Remove(victim, keep, &removed);
  for (const ChainHash& h : removed) evicted.Remember(h);
}

bool PrefixCache::Impl::MakeRoomLocked(size_t need, size_t target, const Node* keep) {
  while (index.bytes().total() + need > target) {
    Entry* victim = index.OldestEvictable(keep);
    if (victim == nullptr) return false;
    if (victim->type != EntryType::kRows) {
      if (Entry* thin = PickThinningLocked(victim)) {
        ++stats.thinned_snapshots;
        victim = thin;
      }
    }
    EvictLocked(victim, keep);
  }
  return true;
}

}  // namespace prefixd::cache
