// PrefixCache::Impl: the state behind PrefixCache and the pieces its methods are built from.
// Internal to the cache module. Every member function named *Locked REQUIRES mu held.
#pragma once

#include <deque>
#include <unordered_set>

#include "cache/block_index.h"
#include "cache/prefix_cache.h"
#include "util/mutex.h"

namespace prefixd::cache {

// A bounded memory of evicted Block ChainHashes (FIFO), to tell kEvicted from kNoEntry.
class EvictedMemory {
 public:
  explicit EvictedMemory(size_t capacity) : capacity_(capacity) {}
  void Remember(const ChainHash& h);
  bool Contains(const ChainHash& h) const { return set_.count(h) != 0; }
  void Clear();

 private:
  size_t capacity_;
  std::deque<ChainHash> order_;
  std::unordered_set<ChainHash, DigestHash> set_;
};

// The verified chain a request walks through the index.
struct Walk {
  Node* root = nullptr;
  std::vector<Node*> path;  // path[k] holds Block k
  bool verification_failed = false;
  bool next_evicted = false;  // the first Block not found was evicted
  Node* deepest() const { return path.empty() ? root : path.back(); }
};

struct PrefixCache::Impl {
  explicit Impl(Options o);

  ChainHash Hash(const ChainHash& parent, std::span<const Token> block) const {
    return opts.chain_hash != nullptr ? opts.chain_hash(parent, block)
                                      : NextChainHash(parent, block);
  }
  std::vector<ChainHash> HashChain(const Digest& domain, std::span<const Token> tokens) const;

  // lookup.cpp
  Walk WalkHashesLocked(const Digest& domain, std::span<const Token> tokens,
                        std::span<const ChainHash> hashes) PREFIXD_REQUIRES(mu);
  Match MatchLocked(const Walk& w, std::span<const Token> tokens, size_t limit)
      PREFIXD_REQUIRES(mu);
  void CountLookupLocked(const Match& m, size_t limit) PREFIXD_REQUIRES(mu);

  // prefix_cache.cpp
  // The node at `depth` Blocks along `tokens` (verified by tokens), or null. Creates
  // placeholder nodes (and the root) on the way when `create` is set.
  Node* WalkTrieLocked(const Digest& domain, std::span<const Token> tokens, size_t depth,
                       bool create) PREFIXD_REQUIRES(mu);
  InsertOutcome AddBlockLocked(Node** cur, std::span<const Token> block, PayloadRef rows)
      PREFIXD_REQUIRES(mu);
  InsertOutcome AddSnapshotLocked(Node* node, SnapshotKind kind, PayloadRef snapshot)
      PREFIXD_REQUIRES(mu);
  InsertOutcome AddTailLocked(Node* node, std::span<const Token> tail, SnapshotKind kind,
                              PayloadRef snapshot, PayloadRef tail_rows) PREFIXD_REQUIRES(mu);
  InsertOutcome AdmitLocked(size_t bytes, const Node* keep) PREFIXD_REQUIRES(mu);
  InsertOutcome CountInsertLocked(InsertOutcome o) PREFIXD_REQUIRES(mu);

  // eviction.cpp
  // Evicts until held + need <= target. False when only pinned entries are left.
  bool MakeRoomLocked(size_t need, size_t target, const Node* keep) PREFIXD_REQUIRES(mu);
  Entry* PickThinningLocked(Entry* victim) const PREFIXD_REQUIRES(mu);
  void EvictLocked(Entry* victim, const Node* keep) PREFIXD_REQUIRES(mu);

  Options opts;
  mutable Mutex mu;
  BlockIndex index PREFIXD_GUARDED_BY(mu);
  EvictedMemory evicted PREFIXD_GUARDED_BY(mu);
  Stats stats PREFIXD_GUARDED_BY(mu);
};

}  // namespace prefixd::cache
