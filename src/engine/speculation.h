// Speculative decoding's two halves around one verification call: the Drafter proposes the
// tokens that may follow a slot's sequence (llama.cpp common's speculative implementations,
// common/speculative.h), and RollBack takes back the drafted tokens the target rejected, so
// the sequence holds exactly what a run without speculation holds: the committed tokens.
//
// Every capture point the cache takes is then a committed state (docs/architecture.md,
// "Speculative decoding").
// Thread-safety: as Context's: the scheduler thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/codec/types.h"
#include "engine/options.h"
#include "util/status.h"

struct common_speculative;
struct llama_context;

namespace prefixd::engine {

class Context;
class DraftHistory;
class Model;
struct ContextOptions;

// How a sequence drops the rows of rejected drafts.
enum class Rollback {
  kTruncate,    // the memory removes trailing positions: attention, sliding-window, MLA/DSA
                // caches, and recurrent states that llama.cpp snapshots per token (n_rs_seq)
  kCheckpoint,  // recurrent or hybrid without per-token snapshots: the recurrent part (and
                // window) is checkpointed before verification, set back, and the taken
                // tokens decoded again
  kNone,        // no exact rollback (deepseek4's compressed cache): no speculation
};

const char* RollbackName(Rollback r);

// The per-token recurrent states to ask llama.cpp for (ContextOptions::n_rs_seq) when drafts
// are up to `n_max` tokens long: n_max for short drafts (a draft model's, MTP's), 0 above
// kMaxRecurrentSnapshots, where keeping 1 + n_max copies of every recurrent state costs more
// memory and per-call writes than a checkpoint per verification (ngram-mod drafts 64).
inline constexpr int32_t kMaxRecurrentSnapshots = 16;
inline uint32_t RecurrentSnapshotsFor(int32_t n_max) {
  return n_max <= kMaxRecurrentSnapshots ? uint32_t(n_max) : 0;
}

// What `ctx`'s memory supports, tried on sequence 0 (left empty): call before any slot is used.
Rollback ProbeRollback(Context& ctx, MemoryLayout layout);

// The names --spec-type takes (llama-server's), comma-separated; InvalidArgument names the
// valid ones. "none" or "" is no speculation.
Result<std::vector<SpecType>> ParseSpecTypes(const std::string& names);
std::string SpecTypesName(const std::vector<SpecType>& types);

class Drafter {
 public:
  // One pool of drafting state per cache domain (tenant): an n-gram pool holds the text of one
  // domain, so no tenant's text drafts another's, and a domain's slots share theirs. At most
  // `n_seq` pools live; a new domain replaces the least recently used one no slot is drafting
  // with. With SpecType::kDraft, AttachDraftModel must follow before the first Begin.
  static Result<std::unique_ptr<Drafter>> Create(const SpecOptions& options, uint32_t n_seq);
  bool needs_draft_model() const;
  // Loads the draft model (options.draft_model_path) into a context of its own with the
  // target's sequences and settings (`copt`): InvalidArgument when it does not load or its
  // vocabulary is not the target's, NotSupported when its memory cannot drop trailing
  // positions (its sequences follow the target's by truncation). Runs on the scheduler thread.
  Status AttachDraftModel(Context& target, const ContextOptions& copt);
  // With SpecType::kDraftMtp: the model's MTP head, in a draft context of its own over the
  // target's model (loaded with ModelOptions::load_mtp), before the first Begin. The head reads
  // the target's hidden state of every token it decodes, so its sequences follow the target's
  // through a SequenceObserver: each decode is mirrored into the head's context (llama.cpp
  // common's process hook), truncations are mirrored, and a cleared or restored sequence starts
  // the head's afresh at the next decoded position, unless the cache sets the head's history
  // there too (MtpSidecar).
  // NotSupported when the model has no NextN layers. The target must outlive the Drafter.
  Status AttachMtpHead(Context& target, const ContextOptions& copt);
  bool needs_mtp_head() const;
  // The draft model's context (null without one), and the cache of its history: a sync of a
  // draft sequence sets what the tiers hold of its history before decoding the rest, and
  // publishes what it decoded (DraftHistory). REQUIRES: history outlives the Drafter, or is
  // detached (nullptr) first.
  Context* draft_context() const { return draft_ctx_.get(); }
  void AttachDraftHistory(DraftHistory* history) { draft_history_ = history; }
  // History tokens the draft model decoded to catch its sequences up with the target's.
  uint64_t draft_prefill_tokens() const { return draft_prefill_tokens_; }
  // History tokens the draft's sequences got from the cache instead (DraftHistory).
  uint64_t draft_restored_tokens() const;
  // The MTP head's context (null without one) and its carry for `seq`: the target's hidden row
  // the head pairs with the sequence's next token. With the head's KV rows, what a cached
  // prefix keeps of the head (MtpSidecar); false when there is no head or (set) the row's
  // width is not the model's.
  Context* mtp_head() const { return mtp_ctx_.get(); }
  bool MtpCarry(int32_t seq, std::vector<float>* h) const;
  bool SetMtpCarry(int32_t seq, const std::vector<float>& h);
  // The target's hidden rows by position (MtpSidecar, for targets without Snapshots, where a
  // restore may end anywhere and the carry there must be at hand): with keep, the head's
  // observer records the rows of every decoded position of each sequence (truncations and
  // clears drop theirs). MtpHiddenRows: the rows of [p0, p1) (width n_embd_out each), false
  // when not all are held. SetMtpHiddenRows: the record of `seq` becomes `rows` from p0 (a
  // restored prefix's). DropMtpHiddenRowsBefore: forgets the positions before p.
  void KeepMtpHiddenRows(bool keep);
  bool MtpHiddenRows(int32_t seq, int32_t p0, int32_t p1, std::vector<float>* rows) const;
  void SetMtpHiddenRows(int32_t seq, int32_t p0, std::vector<float> rows);
  void DropMtpHiddenRowsBefore(int32_t seq, int32_t p);
  ~Drafter();
  Drafter(const Drafter&) = delete;
  Drafter& operator=(const Drafter&) = delete;

  // The most tokens a draft may have (the largest n_max of the configured types).
  int32_t n_max() const { return n_max_; }
  // A request on `seq` starts generating; `prompt` is decoded (an n-gram pool learns it).
  void Begin(int32_t seq, const Digest& domain, std::span<const Token> prompt);
  // Up to `n_max` tokens to follow `history` + `id_last` (id_last at position `pos`); empty:
  // none worth verifying. A draft model's sequence is brought to `history` first: it keeps
  // what it shares with it and decodes the rest. REQUIRES: Begin for `seq` since its last End;
  // history.size() == pos.
  std::vector<Token> Draft(int32_t seq, const std::vector<Token>& history, Token id_last,
                           int32_t pos, int32_t n_max);
  // Draft for several sequences at once: the drafters of one pool run for all of its
  // sequences together (the MTP head decodes every sequence's next draft token in one call).
  struct Want {
    int32_t seq;
    const std::vector<Token>* history;
    Token id_last;
    int32_t pos;
    int32_t n_max;
    std::vector<Token>* draft;  // out
  };
  void DraftAll(std::span<const Want> wants);
  // The target took the first `n_accepted` tokens of the last draft of `seq`.
  void Accept(int32_t seq, int32_t n_accepted);
  // The request on `seq` ended: its pool may be replaced.
  void End(int32_t seq);

 private:
  struct Pool;
  class MtpFollower;
  Drafter(const SpecOptions& options, uint32_t n_seq, int32_t n_max);
  Pool& PoolFor(const Digest& domain);
  // The draft model's sequence `seq` made to hold `history`; false when it could not be.
  bool SyncDraftSequence(int32_t seq, const std::vector<Token>& history);

  // The draft model, its context and what each of its sequences holds (positions 0..).
  std::unique_ptr<Model> draft_model_;
  std::unique_ptr<Context> draft_ctx_;
  std::vector<std::vector<Token>> draft_tokens_;
  DraftHistory* draft_history_ = nullptr;
  uint64_t draft_prefill_tokens_ = 0;
  llama_context* target_ctx_ = nullptr;
  // The MTP head's context and the observer on the target that keeps it in step.
  std::unique_ptr<Context> mtp_ctx_;
  std::unique_ptr<MtpFollower> mtp_follower_;
  Context* mtp_target_ = nullptr;

  SpecOptions options_;
  uint32_t n_seq_;
  int32_t n_max_;
  uint64_t clock_ = 0;
  std::vector<std::unique_ptr<Pool>> pools_;
  std::vector<Pool*> seq_pool_;  // the pool each sequence drafts with (null: none)
};

// Takes back the decode of `decoded` (at positions pos0, pos0 + 1, ...) down to `keep`
// positions: afterwards `seq` holds [0, keep). `checkpoint` is the partial state taken before
// that decode (kCheckpoint only). An error leaves the sequence unusable (the caller fails the
// request and clears it): never a state that holds a rejected token.
// REQUIRES: pos0 < keep <= pos0 + decoded.size().
Status RollBack(Context& ctx, Rollback kind, int32_t seq, int32_t pos0,
                std::span<const Token> decoded, int32_t keep,
                std::span<const uint8_t> checkpoint);

}  // namespace prefixd::engine
