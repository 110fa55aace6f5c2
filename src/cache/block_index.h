// BlockIndex: the trie behind PrefixCache — Block nodes, their entries, the byte count and
// the eviction order. Internal to the cache module.
//
// Invariants (checked by Check()):
//  - nodes_ maps every node's hash to it. A root (depth 0) is keyed by its domain root and has
//    no tokens, rows or Snapshot; a Block node at depth d+1 holds the d-th Block's tokens
//    (block_size of them), and parent->children lists it.
//  - A node without entries, Tails and children is removed at once (prune), except the one
//    node an insert in progress protects (`keep`).
//  - Every Block node has a rows entry (a placeholder's holds no payload and 0 bytes); when it
//    is evicted the node goes with it.
//  - An entry is in the eviction order iff nothing depends on it: every Snapshot and Tail, and
//    the rows of a node with no children, no Tails and no Snapshot.
//  - bytes() equals the sum of the entries' payloads' memory (PayloadMemory), by entry type.
//
// Ownership: nodes own their entries; the index owns the nodes. Payloads are shared with
// callers (PayloadRef). Thread-safety: none; PrefixCache's mutex guards it.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_listener.h"
#include "cache/stats.h"
#include "cache/types.h"
#include "util/status.h"

namespace prefixd::cache {

struct DigestHash {
  size_t operator()(const prefixd::Digest& d) const {
    size_t v;
    std::memcpy(&v, d.data(), sizeof v);
    return v;
  }
};

enum class EntryType : uint8_t { kRows, kSnapshot, kTail };

struct Node;

struct Entry {
  EntryType type = EntryType::kRows;
  Node* node = nullptr;     // the Block (kRows, kSnapshot) or the Tail's parent (kTail)
  PayloadRef payload;       // rows, Snapshot, or a Tail's rows (null for a rows-less Tail)
  PayloadRef snapshot;      // a Tail's Snapshot (null for a pure-attention Tail)
  SnapshotKind kind = SnapshotKind::kBlockBoundary;
  std::vector<Token> tokens;  // a Tail's tokens [kB, P)
  prefixd::Digest tail_key{};
  size_t bytes = 0;
  uint64_t last_use = 0;
  uint64_t created_unix_ms = 0;  // wall clock, for listings (prefix_inventory.cpp)
  uint64_t used_unix_ms = 0;     // inserted or touched last
  bool listed = false;      // in the eviction order

  // Referenced outside the cache: a restore (or the inserter) holds the payload.
  bool Pinned() const {
    return (payload && payload.use_count() > 1) || (snapshot && snapshot.use_count() > 1);
  }
  size_t End(size_t block_size) const;  // P: the position the entry restores up to
};

struct Node {
  ChainHash hash{};
  Node* parent = nullptr;
  size_t depth = 0;  // Blocks in the prefix that ends here
  std::vector<Token> tokens;
  std::vector<Node*> children;
  std::unique_ptr<Entry> rows;      // every Block has one; a placeholder's payload is null
  std::unique_ptr<Entry> snapshot;  // Snapshot at the Block's end
  std::vector<std::unique_ptr<Entry>> tails;
  uint64_t last_use = 0;

  bool Empty() const { return !rows && !snapshot && tails.empty() && children.empty(); }
  Node* FindChild(std::span<const Token> block) const;
  Entry* FindTail(std::span<const Token> tail_tokens) const;
};

// Wall-clock milliseconds since the Unix epoch.
uint64_t UnixMillisNow();

// Length of the common prefix of a and b.
size_t CommonPrefix(std::span<const Token> a, std::span<const Token> b);

class BlockIndex {
 public:
  explicit BlockIndex(size_t block_size) : block_size_(block_size) {}
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  size_t block_size() const { return block_size_; }
  // Tells `listener` (null: nobody) of every Block node added or pruned and of Clear().
  // REQUIRES: listener outlives this object.
  void set_listener(BlockListener* listener) { listener_ = listener; }
  Node* Find(const ChainHash& h) const;
  Node* FindRoot(const prefixd::Digest& domain) const;
  Node* GetOrAddRoot(const prefixd::Digest& domain);
  // Calls fn(root) for every domain root. O(nodes).
  void ForEachRoot(const std::function<void(const Node&)>& fn) const {
    for (const auto& [hash, node] : nodes_) {
      if (node->depth == 0) fn(*node);
    }
  }
  // REQUIRES: no node has hash h; block.size() == block_size().
  Node* AddChild(Node* parent, const ChainHash& h, std::span<const Token> block);

  // Each REQUIRES that the slot is free (no rows / Snapshot / equal Tail yet).
  Entry* SetRows(Node* node, PayloadRef rows);
  Entry* SetSnapshot(Node* node, PayloadRef snapshot, SnapshotKind kind);
  Entry* AddTail(Node* node, std::span<const Token> tokens, const prefixd::Digest& key,
                 PayloadRef rows, PayloadRef snapshot, SnapshotKind kind);

  void Touch(Entry* e);
  void TouchNode(Node* n) { n->last_use = ++clock_; }

  // The least recently used unpinned entry in the eviction order, skipping keep's rows.
  Entry* OldestEvictable(const Node* keep) const;
  // Removes a listed entry, then every node that became empty (never `keep`). Appends the
  // hashes of removed Block nodes to *removed.
  void Remove(Entry* e, const Node* keep, std::vector<ChainHash>* removed);
  // Removes `node` and its empty ancestors if empty.
  void Prune(Node* node, const Node* keep, std::vector<ChainHash>* removed);

  const TierBytes& bytes() const { return bytes_; }
  size_t n_blocks() const { return n_blocks_; }
  size_t n_snapshots() const { return n_snapshots_; }
  size_t n_tails() const { return n_tails_; }

  // Reports every Block node as removed (deepest first), then kCleared, and drops everything.
  void Clear();
  // Reports every Block node as removed (deepest first) and keeps them: the tier is going away
  // with its process.
  void ReportAllRemoved() const;
  // Reports kRemoved (Tier::kRam) for each of `held_below` this index does not hold, then
  // kStored for every Block node, parents first (BlockSource::AnnounceBlocks). O(nodes log nodes).
  void Announce(std::span<const BlockRef> held_below) const;
  Status Check() const;

 private:
  Entry* Adopt(std::unique_ptr<Entry>& slot, std::unique_ptr<Entry> e);
  void Account(const Entry& e, bool add);
  void List(Entry* e);
  void Unlist(Entry* e);
  void RelistRows(Node* node);  // lists the rows iff nothing depends on them
  void Notify(BlockEvent::Kind kind, const Node& node) const;
  // The Block nodes (depth >= 1), by ascending depth.
  std::vector<const Node*> BlocksByDepth() const;
  std::unique_ptr<Entry> Detach(Entry* e);
  Status CheckNode(const Node& n, TierBytes* sum, size_t* n_listed) const;

  size_t block_size_;
  BlockListener* listener_ = nullptr;
  std::unordered_map<ChainHash, std::unique_ptr<Node>, DigestHash> nodes_;
  std::set<std::pair<uint64_t, Entry*>> evictable_;
  uint64_t clock_ = 0;
  TierBytes bytes_;
  size_t n_blocks_ = 0, n_snapshots_ = 0, n_tails_ = 0;
};

}  // namespace prefixd::cache
