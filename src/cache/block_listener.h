// BlockListener: what a tier's index tells an observer as Blocks enter and leave it, so that
// a router outside the process can see where prefixes are cached (events/kv_events.h turns
// these into llm-d's / vLLM's KV events).
//
// Events describe Block nodes of the RAM Tier's trie (block_index.h): a Block is stored when
// its node is created (placeholders of rows-less models included) and removed when the node
// is pruned; parents are stored before their children and removed after them, because the
// trie adds and prunes in that order. Snapshots and Tails are not Blocks and are not reported.
//
// Thread-safety: OnBlockEvent is called with the cache's index mutex held, from any thread
// that inserts, evicts or clears. REQUIRES of implementations: return at once, never block,
// never call back into the cache (copy the event into a bounded queue and leave).
#pragma once

#include <optional>
#include <vector>

#include "cache/chain_hash.h"
#include "cache/types.h"

namespace prefixd::cache {

struct BlockEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  Tier tier = Tier::kRam;
  Digest domain{};      // the domain root of the Block's trie (unset for kCleared)
  ChainHash hash{};     // the Block's ChainHash h_k
  ChainHash parent{};   // h_{k-1}; the domain root when depth == 1
  size_t depth = 0;     // k + 1: Blocks in the prefix that ends with this one
  std::vector<Token> tokens;  // the Block's tokens (kStored only)
};

class BlockListener {
 public:
  virtual ~BlockListener() = default;
  virtual void OnBlockEvent(BlockEvent event) = 0;
};

// Forwards the events of one domain (and every kCleared) to `next`, or of every domain when
// `only` is nullopt: how tenant-salted domains are kept off a stream.
// REQUIRES: next outlives this object.
class DomainFilter : public BlockListener {
 public:
  DomainFilter(BlockListener& next, std::optional<Digest> only) : next_(next), only_(only) {}
  void OnBlockEvent(BlockEvent event) override {
    if (event.kind != BlockEvent::Kind::kCleared && only_ && event.domain != *only_) return;
    next_.OnBlockEvent(std::move(event));
  }

 private:
  BlockListener& next_;
  std::optional<Digest> only_;
};

}  // namespace prefixd::cache
