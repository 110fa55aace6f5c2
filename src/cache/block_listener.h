// BlockListener: what a tier's index tells an observer as Blocks enter and leave it, so that
// a router outside the process can see where prefixes are cached (events/kv_events.h turns
// these into llm-d's / vLLM's KV events).
//
// Events describe Block nodes of the RAM Tier's trie (block_index.h): a Block is stored when
// its node is created (placeholders of rows-less models included) and removed when the node
// is pruned or cleared; parents are stored before their children and removed after them,
// because the trie adds and prunes in that order. Snapshots and Tails are not Blocks and are
// not reported. A lower tier's Blocks (its kBlockRows records) are reported with its own
// `tier` (cache/store_block_events.h), in the order its index gains and loses them; the
// Blocks the slots' sequences hold with Tier::kSlot (cache/slot_blocks.h).
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

// A Block a lower tier holds: what BlockSource::AnnounceBlocks withdraws from the RAM tier
// when RAM does not hold it.
struct BlockRef {
  Digest domain{};
  ChainHash hash{};
  size_t depth = 0;  // k + 1
};

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

// What a listener may ask of the cache that tells it (BlockListener::Attach): to say again
// what every tier holds, for a subscriber that joined late and missed what was said before.
class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // Reports through the listener every Block each tier holds as kStored (parents first; the
  // disk's, then RAM's, then the slots'), and kRemoved from the RAM tier for every Block a
  // lower tier holds and RAM does not (a process before this one may have reported it in RAM).
  // Called on the listener's own thread, never from OnBlockEvent.
  virtual void AnnounceBlocks() = 0;
};

class BlockListener {
 public:
  virtual ~BlockListener() = default;
  virtual void OnBlockEvent(BlockEvent event) = 0;
  // The cache that reports to this listener, or null when it goes away; a listener that never
  // asks for a resend ignores it. REQUIRES of implementations: once Attach(nullptr) returns,
  // the earlier source is neither called nor running on another thread.
  virtual void Attach(BlockSource* source) { (void)source; }
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
  void Attach(BlockSource* source) override { next_.Attach(source); }

 private:
  BlockListener& next_;
  std::optional<Digest> only_;
};

}  // namespace prefixd::cache
