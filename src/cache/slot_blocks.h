// SlotBlocks: the Blocks the slots' sequences hold, as BlockEvents of Tier::kSlot (medium "GPU"
// on the KV-event stream), so that a router prefers the server whose slot still holds a
// prefix over one that must restore it from RAM or disk.
//
// The engine says what a slot's sequence holds whenever that changes (Hold: after a restore,
// a prefill, at the end of a request, when the slot forgets); this unit turns it into the
// slot's full Blocks (B tokens each, ChainHashes over the slot's domain, the same hashes the
// RAM tier gives the same prefix) and reports the difference:
//   - kStored when a slot comes to hold a Block no slot held (parents before children);
//   - kRemoved when the last slot that held a Block drops it (children before parents).
// A partial Block at the end of what a slot holds is not a Block and is not reported.
//
// Invariants: refs_ counts, for each Block, the slots whose chain holds it; a Block is in
// refs_ exactly while it has been reported stored and not removed since. A slot's chain is a
// prefix chain (each Block's parent is the one before it), so a slot that holds a Block holds
// its parent too: no Block is reported removed while a child of it is held.
//
// Thread-safety: every method may be called from any thread; the events are sent under this
// object's lock, in the order they happen. The listener's REQUIRES (block_listener.h) hold:
// it must return at once and never call back.
#pragma once

#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_index.h"
#include "cache/block_listener.h"
#include "util/mutex.h"

namespace prefixd::cache {

class SlotBlocks {
 public:
  // REQUIRES: next outlives this object; block_size (the cache's B) > 0.
  SlotBlocks(BlockListener& next, size_t block_size) : next_(next), block_size_(block_size) {}

  // Slot `slot` now holds `tokens` (positions [0, size)) of `domain`, and nothing else.
  // Empty `tokens`: the slot holds nothing. Ignored once Close has run.
  void Hold(size_t slot, const Digest& domain, std::span<const Token> tokens);
  // Every slot holds nothing now (a clear, an eviction the slots forget their sequences for):
  // reports each held Block removed, children first. Later Holds report again.
  void DropAll();
  // DropAll, and every later Hold is ignored (the server stops).
  void Close();
  // The resend for a late subscriber: kStored for every held Block, parents first, each once.
  // Nothing is withdrawn: what a process killed outright left held in its slots stays in an
  // indexer until the same Blocks are removed (withdrawing every lower tier's Block from the
  // slots would make each resend a third longer).
  void Announce() const;

  // Blocks held by at least one slot (for tests and stats).
  size_t n_blocks() const;

 private:
  // What one slot holds: its tokens and the ChainHashes of its full Blocks.
  struct Held {
    Digest domain{};
    std::vector<Token> tokens;
    std::vector<ChainHash> hashes;
  };

  // The chain of `tokens` in `domain`, reusing `old`'s hashes where the tokens agree.
  std::vector<ChainHash> ChainOf(const Held& old, const Digest& domain,
                                 std::span<const Token> tokens) const;
  // Drops one reference to each of held.hashes[from, end), deepest first.
  void Release(const Held& held, size_t from) PREFIXD_REQUIRES(mu_);
  // Adds one reference to each of held.hashes[from, end), parents first.
  void Acquire(const Held& held, size_t from) PREFIXD_REQUIRES(mu_);
  void SendStored(const Held& held, size_t k) const PREFIXD_REQUIRES(mu_);
  void SendRemoved(const Digest& domain, const ChainHash& hash, size_t depth) const
      PREFIXD_REQUIRES(mu_);

  BlockListener& next_;
  const size_t block_size_;
  mutable Mutex mu_;
  bool closed_ PREFIXD_GUARDED_BY(mu_) = false;
  std::vector<Held> slots_ PREFIXD_GUARDED_BY(mu_);  // grown to the highest slot named
  std::unordered_map<ChainHash, size_t, DigestHash> refs_ PREFIXD_GUARDED_BY(mu_);
};

}  // namespace prefixd::cache
