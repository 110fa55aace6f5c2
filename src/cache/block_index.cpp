#include "cache/block_index.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <string>

namespace prefixd::cache {

uint64_t UnixMillisNow() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

size_t Entry::End(size_t block_size) const {
  size_t start = node->depth * block_size;
  return type == EntryType::kTail ? start + tokens.size() : start;
}

Node* Node::FindChild(std::span<const Token> block) const {
  for (Node* c : children) {
    if (std::equal(c->tokens.begin(), c->tokens.end(), block.begin(), block.end())) return c;
  }
  return nullptr;
}

Entry* Node::FindTail(std::span<const Token> tail_tokens) const {
  for (const auto& t : tails) {
    if (std::equal(t->tokens.begin(), t->tokens.end(), tail_tokens.begin(), tail_tokens.end())) {
      return t.get();
    }
  }
  return nullptr;
}

size_t CommonPrefix(std::span<const Token> a, std::span<const Token> b) {
  size_t n = std::min(a.size(), b.size());
  return std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin();
}

Node* BlockIndex::Find(const ChainHash& h) const {
  auto it = nodes_.find(h);
  return it == nodes_.end() ? nullptr : it->second.get();
}

Node* BlockIndex::FindRoot(const Digest& domain) const {
  Node* n = Find(domain);
  return n != nullptr && n->depth == 0 ? n : nullptr;
}

Node* BlockIndex::GetOrAddRoot(const Digest& domain) {
  auto& slot = nodes_[domain];
  if (!slot) {
    slot = std::make_unique<Node>();
    slot->hash = domain;
  }
  return slot->depth == 0 ? slot.get() : nullptr;
}

Node* BlockIndex::AddChild(Node* parent, const ChainHash& h, std::span<const Token> block) {
  assert(block.size() == block_size_ && Find(h) == nullptr);
  auto node = std::make_unique<Node>();
  node->hash = h;
  node->parent = parent;
  node->depth = parent->depth + 1;
  node->tokens.assign(block.begin(), block.end());
  node->last_use = ++clock_;
  Node* raw = node.get();
  nodes_.emplace(h, std::move(node));
  parent->children.push_back(raw);
  ++n_blocks_;
  RelistRows(parent);
  Notify(BlockEvent::Kind::kStored, *raw);
  return raw;
}

void BlockIndex::Notify(BlockEvent::Kind kind, const Node& node) const {
  if (listener_ == nullptr) return;
  BlockEvent e;
  e.kind = kind;
  e.hash = node.hash;
  e.parent = node.parent->hash;
  e.depth = node.depth;
  const Node* root = &node;
  while (root->parent != nullptr) root = root->parent;  // O(depth): the root keys the domain
  e.domain = root->hash;
  if (kind == BlockEvent::Kind::kStored) e.tokens = node.tokens;
  listener_->OnBlockEvent(std::move(e));
}

Entry* BlockIndex::Adopt(std::unique_ptr<Entry>& slot, std::unique_ptr<Entry> e) {
  assert(!slot);
  slot = std::move(e);
  Entry* raw = slot.get();
  raw->bytes = PayloadMemory(raw->payload) + PayloadMemory(raw->snapshot);
  raw->last_use = ++clock_;
  raw->node->last_use = raw->last_use;
  raw->created_unix_ms = raw->used_unix_ms = UnixMillisNow();
  Account(*raw, true);
  return raw;
}

Entry* BlockIndex::SetRows(Node* node, PayloadRef rows) {
  auto e = std::make_unique<Entry>();
  e->type = EntryType::kRows;
  e->node = node;
  e->payload = std::move(rows);
  Entry* raw = Adopt(node->rows, std::move(e));
  RelistRows(node);
  return raw;
}

Entry* BlockIndex::SetSnapshot(Node* node, PayloadRef snapshot, SnapshotKind kind) {
  auto e = std::make_unique<Entry>();
  e->type = EntryType::kSnapshot;
  e->node = node;
  e->payload = std::move(snapshot);
  e->kind = kind;
  Entry* raw = Adopt(node->snapshot, std::move(e));
  ++n_snapshots_;
  List(raw);
  RelistRows(node);
  return raw;
}

Entry* BlockIndex::AddTail(Node* node, std::span<const Token> tokens, const Digest& key,
                           PayloadRef rows, PayloadRef snapshot, SnapshotKind kind) {
  auto e = std::make_unique<Entry>();
  e->type = EntryType::kTail;
  e->node = node;
  e->payload = std::move(rows);
  e->snapshot = std::move(snapshot);
  e->kind = kind;
  e->tokens.assign(tokens.begin(), tokens.end());
  e->tail_key = key;
  node->tails.emplace_back();
  Entry* raw = Adopt(node->tails.back(), std::move(e));
  ++n_tails_;
  List(raw);
  RelistRows(node);
  return raw;
}

void BlockIndex::Touch(Entry* e) {
  if (e->listed) Unlist(e);
  e->last_use = ++clock_;
  e->node->last_use = e->last_use;
  e->used_unix_ms = UnixMillisNow();
  if (e->type != EntryType::kRows) {
    List(e);
  } else {
    RelistRows(e->node);
  }
}

Entry* BlockIndex::OldestEvictable(const Node* keep) const {
  for (const auto& [use, e] : evictable_) {
    if (e->Pinned()) continue;
    if (e->type == EntryType::kRows && e->node == keep) continue;
    return e;
  }
  return nullptr;
}

void BlockIndex::Account(const Entry& e, bool add) {
  uint64_t* field = e.type == EntryType::kRows       ? &bytes_.rows
                    : e.type == EntryType::kSnapshot ? &bytes_.snapshots
                                                      : &bytes_.tails;
  if (add) {
    *field += e.bytes;
  } else {
    assert(*field >= e.bytes);
    *field -= e.bytes;
  }
}

void BlockIndex::List(Entry* e) {
  if (e->listed) return;
  evictable_.emplace(e->last_use, e);
  e->listed = true;
}

void BlockIndex::Unlist(Entry* e) {
  if (!e->listed) return;
  evictable_.erase({e->last_use, e});
  e->listed = false;
}

void BlockIndex::RelistRows(Node* node) {
  if (!node->rows) return;
  bool leaf = node->children.empty() && node->tails.empty() && !node->snapshot;
  if (leaf) {
    List(node->rows.get());
  } else {
    Unlist(node->rows.get());
  }
}

std::unique_ptr<Entry> BlockIndex::Detach(Entry* e) {
  Node* node = e->node;
  Unlist(e);
  Account(*e, false);
  std::unique_ptr<Entry> owned;
  if (e->type == EntryType::kRows) {
    owned = std::move(node->rows);
  } else if (e->type == EntryType::kSnapshot) {
    owned = std::move(node->snapshot);
    --n_snapshots_;
  } else {
    auto it = std::find_if(node->tails.begin(), node->tails.end(),
                           [e](const auto& t) { return t.get() == e; });
    owned = std::move(*it);
    node->tails.erase(it);
    --n_tails_;
  }
  return owned;
}

void BlockIndex::Remove(Entry* e, const Node* keep, std::vector<ChainHash>* removed) {
  assert(e->listed);
  Node* node = e->node;
  std::unique_ptr<Entry> owned = Detach(e);
  RelistRows(node);
  Prune(node, keep, removed);
}

void BlockIndex::Prune(Node* node, const Node* keep, std::vector<ChainHash>* removed) {
  while (node != nullptr && node != keep && node->Empty()) {
    Node* parent = node->parent;
    if (parent != nullptr) {
      auto& sib = parent->children;
      sib.erase(std::find(sib.begin(), sib.end(), node));
      --n_blocks_;
      if (removed != nullptr) removed->push_back(node->hash);
      Notify(BlockEvent::Kind::kRemoved, *node);  // its ancestors are still linked
    }
    nodes_.erase(node->hash);  // frees node
    if (parent != nullptr) RelistRows(parent);
    node = parent;
  }
}

std::vector<const Node*> BlockIndex::BlocksByDepth() const {
  std::vector<const Node*> out;
  out.reserve(n_blocks_);
  for (const auto& [hash, node] : nodes_) {
    if (node->depth > 0) out.push_back(node.get());
  }
  std::sort(out.begin(), out.end(), [](const Node* a, const Node* b) { return a->depth < b->depth; });
  return out;
}

void BlockIndex::Announce(std::span<const BlockRef> held_below) const {
  if (listener_ == nullptr) return;
  for (const BlockRef& ref : held_below) {
    if (nodes_.count(ref.hash) != 0) continue;
    BlockEvent e;
    e.kind = BlockEvent::Kind::kRemoved;
    e.domain = ref.domain;
    e.hash = ref.hash;
    e.depth = ref.depth;
    listener_->OnBlockEvent(std::move(e));
  }
  for (const Node* n : BlocksByDepth()) Notify(BlockEvent::Kind::kStored, *n);
}

void BlockIndex::ReportAllRemoved() const {
  if (listener_ == nullptr) return;
  std::vector<const Node*> blocks = BlocksByDepth();
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) Notify(BlockEvent::Kind::kRemoved, **it);
}

void BlockIndex::Clear() {
  ReportAllRemoved();  // removals first: some indexers ignore AllBlocksCleared
  evictable_.clear();
  nodes_.clear();
  bytes_ = TierBytes{};
  n_blocks_ = n_snapshots_ = n_tails_ = 0;
  if (listener_ == nullptr) return;
  BlockEvent cleared;
  cleared.kind = BlockEvent::Kind::kCleared;
  listener_->OnBlockEvent(std::move(cleared));
}

Status BlockIndex::CheckNode(const Node& n, TierBytes* sum, size_t* n_listed) const {
  auto fail = [&](const std::string& what) {
    return Status::Internal("index node " + DigestHex(n.hash, 8) + ": " + what);
  };
  if (n.depth == 0 && (n.parent || !n.tokens.empty() || n.rows || n.snapshot)) {
    return fail("root holds Block data");
  }
  if (n.depth > 0) {
    if (!n.rows) return fail("Block without a rows entry");
    if (!n.parent || n.parent->depth + 1 != n.depth) return fail("bad parent/depth");
    auto& sib = n.parent->children;
    if (std::count(sib.begin(), sib.end(), &n) != 1) return fail("not listed by parent");
    if (n.tokens.size() != block_size_) return fail("token count != block size");
  }
  if (n.Empty()) return fail("empty node not pruned");
  bool leaf = n.children.empty() && n.tails.empty() && !n.snapshot;
  if (n.rows) {
    if (n.rows->listed != leaf) return fail("rows listing != leaf");
    sum->rows += n.rows->bytes;
    *n_listed += n.rows->listed;
  }
  if (n.snapshot) {
    if (!n.snapshot->listed) return fail("snapshot not listed");
    sum->snapshots += n.snapshot->bytes;
    ++*n_listed;
  }
  for (const auto& t : n.tails) {
    if (!t->listed || t->tokens.empty() || t->tokens.size() >= block_size_) {
      return fail("bad tail");
    }
    sum->tails += t->bytes;
    ++*n_listed;
  }
  for (const Node* c : n.children) {
    if (c->parent != &n || Find(c->hash) != c) return fail("child not indexed");
  }
  return Status::OK();
}

Status BlockIndex::Check() const {
  TierBytes sum;
  size_t n_listed = 0, n_block_nodes = 0;
  for (const auto& [hash, node] : nodes_) {
    if (hash != node->hash) return Status::Internal("index key != node hash");
    PREFIXD_RETURN_IF_ERROR(CheckNode(*node, &sum, &n_listed));
    n_block_nodes += node->depth > 0;
  }
  if (sum.rows != bytes_.rows || sum.snapshots != bytes_.snapshots || sum.tails != bytes_.tails) {
    return Status::Internal("byte accounting differs from the entries");
  }
  if (n_listed != evictable_.size()) return Status::Internal("eviction order has stale entries");
  if (n_block_nodes != n_blocks_) return Status::Internal("block count differs");
  return Status::OK();
}

}  // namespace prefixd::cache
