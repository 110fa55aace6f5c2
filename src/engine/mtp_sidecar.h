// MtpSidecar: the MTP head's share of a cached prefix. With --spec-type draft-mtp the head
// keeps a history of its own for every sequence (its KV rows: at position p, the target's
// hidden state at p - 1 beside token p) and a carry (the target's hidden row at the sequence's
// last position, which the head pairs with the next token). A sequence the cache restores to P
// would otherwise start the head empty at P: the prompt would have to run through the head
// again, or the drafts would read nothing of it.
//
// The sidecar keeps both in the target's tiers, in a domain of their own (DomainOf): the head's
// rows Block by Block like the target's, and at each Snapshot position of the target a Snapshot
// holding the carry (with the Tail rows). A target without Snapshots (pure attention, MLA) may
// restore to any P, so there every row payload of the head holds, beside each row, the target's
// hidden row at its position: the carry of a restore that ends after it (a hidden row costs
// n_embd floats a token, beside the head's one layer of KV). A restore to P sets the head's
// sequence from there, so it drafts as after a cold prefill to P and the prompt is never run
// through the head. The
// records are the cache's, checked like every other; any refusal, or a history the tiers lack
// (evicted, written by a server without speculation), leaves the head's sequence empty: drafts
// get worse, output stays exact (verification decides every token).
//
// Used only by the scheduler thread (through CacheIo).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "cache/tiered_cache.h"
#include "engine/codec/state_codec.h"
#include "engine/job.h"
#include "util/status.h"

namespace prefixd::engine {

class Context;
class Drafter;

class MtpSidecar {
 public:
  // Learns the head's state shape by decoding two rows into its sequence `probe_seq` (left
  // empty). NotSupported for a cache without rows. Without Snapshots, asks the drafter to
  // record the target's hidden rows (Drafter::KeepMtpHiddenRows). REQUIRES: drafter.mtp_head();
  // drafter and cache outlive the sidecar.
  static Result<std::unique_ptr<MtpSidecar>> Create(Drafter& drafter, cache::TieredCache& cache,
                                                    uint32_t block_size, int32_t probe_seq);
  // The domain of the head's entries for the target's `domain`.
  static Digest DomainOf(const Digest& domain);

  // The head's carry for `seq` as a Snapshot payload: taken with each target Snapshot.
  Result<std::vector<uint8_t>> TakeCarry(int32_t seq) const;
  // Publishes the head's rows of the Blocks [from / B, n / B) of `tokens` (n = tokens.size(),
  // all decoded in `seq`) and, for each of `pending` with a carry, the head's Snapshot there.
  // Publishes nothing when the head does not hold [from / B * B, n) (its sequence started
  // later than the Block). Errors only for a state it cannot read.
  Status Publish(int32_t seq, const Digest& domain, std::span<const Token> tokens, int32_t from,
                 std::span<const PendingSnapshot> pending);
  // Sets the head's sequence `seq` to its history of tokens[0, p) from the tiers (RAM, then
  // disk). Returns p, or 0 when the tiers hold no history exactly to p or a check refuses it
  // (the sequence is then empty).
  int32_t Restore(int32_t seq, const Digest& domain, std::span<const Token> tokens, int32_t p);

  ~MtpSidecar();

 private:
  MtpSidecar(Drafter& drafter, Context& head, cache::TieredCache& cache, uint32_t block_size,
             StateShape shape);
  Status SetHistory(int32_t seq, const cache::PrefixCache::Match& m);
  Status SetHistoryWithCarries(int32_t seq, const cache::PrefixCache::Match& m);
  // The head's sequence `seq` set to the rows of [0, p) and its carry there.
  Status SetHeadState(int32_t seq, std::span<const RowsRef> rows, int32_t p,
                      const std::vector<float>& carry);
  Result<cache::PayloadRef> RowsWithCarriesOf(int32_t seq, const ParsedState& parsed, int32_t p0,
                                              int32_t p1) const;
  Status PublishWithCarries(int32_t seq, const Digest& d, std::span<const Token> tokens,
                            int32_t first, const ParsedState& parsed,
                            std::span<const PendingSnapshot> pending);

  Drafter& drafter_;
  Context& head_;
  cache::TieredCache& cache_;
  int32_t block_size_;
  StateShape shape_;
  StateFormat format_;
  // A target without Snapshots (pure attention): a restore may end at any position, so every
  // row of the head is stored with its carry (the target's hidden row there) instead of a
  // carry per Snapshot. The observer records the hidden rows for the publish.
  bool carries_in_rows_ = false;
};

}  // namespace prefixd::engine
