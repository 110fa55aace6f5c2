// DraftHistory: the draft model's share of a cached prefix (--model-draft). The draft model
// keeps a KV cache of its own for every sequence and must hold the whole history before it
// drafts: after a restore into another slot, a restart, or a session that moved servers, the
// prompt would otherwise run through the draft model again (tens of thousands of tokens of
// prefill at every such turn).
//
// Its rows live in the target's tiers, Block by Block, in a domain of their own derived from
// the target's domain (so the tenant's salt) and the draft model's fingerprints (DomainOf).
// A sync of the draft's sequence (Drafter) first sets the longest history the tiers hold and
// decodes only the rest; what it decoded is published as it completes Blocks. Where the cache
// needs a Snapshot at a restore point (a recurrent or hybrid target), each publish ends with a
// small marker Snapshot. The records are the cache's, checked like every other; any refusal
// leaves the sequence empty and the history is decoded: drafts may get slower, output stays
// exact (verification decides every token).
//
// Used only by the scheduler thread (through the Drafter).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "cache/tiered_cache.h"
#include "engine/codec/state_codec.h"
#include "util/hash.h"
#include "util/status.h"

namespace prefixd::engine {

class Context;

class DraftHistory {
 public:
  // Learns the draft's state shape by decoding two tokens into `probe_seq` (left empty).
  // `draft_id` names the draft model and its KV layout (its fingerprints). NotSupported for a
  // draft memory that is not plain attention (a window's rows are not the history).
  // REQUIRES: draft and cache outlive the DraftHistory.
  static Result<std::unique_ptr<DraftHistory>> Create(Context& draft, const Digest& draft_id,
                                                      cache::TieredCache& cache,
                                                      uint32_t block_size, int32_t probe_seq);
  ~DraftHistory();

  // The domain of the draft's entries for the target's `domain`, the draft being `draft_id`.
  static Digest DomainOf(const Digest& draft_id, const Digest& domain);

  // Sets the draft's `seq` to the longest history of `tokens` the tiers hold (RAM, then disk)
  // when it is longer than the `held` tokens the sequence keeps. Returns the tokens the
  // sequence holds afterwards: `held` (untouched) when the tiers hold nothing longer, the
  // restored length, or 0 when a restore was refused (the sequence is then empty).
  int32_t Restore(int32_t seq, const Digest& domain, std::span<const Token> tokens, int32_t held);
  // Publishes the draft's rows of Blocks [from / B, n / B) of `tokens` (n = tokens.size(), all
  // decoded in `seq`), and a marker Snapshot at their end when the cache needs one. Errors
  // only for a state it cannot read.
  Status Publish(int32_t seq, const Digest& domain, std::span<const Token> tokens, int32_t from);

  uint64_t restored_tokens() const { return restored_tokens_; }

 private:
  DraftHistory(Context& draft, const Digest& draft_id, cache::TieredCache& cache,
               uint32_t block_size, StateShape shape, StateFormat format);

  Context& draft_;
  Digest draft_id_;
  cache::TieredCache& cache_;
  int32_t block_size_;
  StateShape shape_;
  StateFormat format_;
  bool needs_marker_;
  uint64_t restored_tokens_ = 0;
};

}  // namespace prefixd::engine
