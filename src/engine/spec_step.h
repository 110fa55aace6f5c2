// SpecStep: what a speculating slot does in one step of the batching loop, around the loop's
// one decode call for every generating slot. Before the call the loop asks each slot's Room,
// drafts for all of them together (Draft) and keeps what each may verify (Keep); the call
// decodes every slot's next token followed by its draft. After it, Verify reads the target's
// tokens at the drafted positions (through SlotTokens, as without speculation), and once every
// slot of the call has read its logits, Settle takes back what the target rejected, so that
// the sequence holds only committed tokens (every capture point the cache takes is one).
//
// The Drafter proposes, RollBack takes back (speculation.h); this is the slot's side of it.
// Thread-safety: the scheduler thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/context.h"
#include "engine/job.h"
#include "engine/slot_tokens.h"
#include "engine/speculation.h"
#include "util/status.h"

namespace prefixd::engine {

// What Verify took of a slot's draft, applied by Settle once every slot of the call has read
// its logits: a checkpoint's replay is a decode of its own, after which the call's are gone.
struct Verdict {
  Slot* slot = nullptr;
  int32_t pos0 = 0;             // where the call's tokens for this slot start
  std::vector<Token> decoded;   // the next token and the draft, as decoded
  std::optional<FinishReason> reason;  // the request ends (after the rollback)
  Status failed;                // sampling failed after the tokens taken
};

class SpecStep {
 public:
  // Speculation for the loop with `drafter`, or null (a warning logged) when the memory of
  // `ctx` cannot take rejected drafts back exactly (ProbeRollback).
  // REQUIRES: drafter and ctx outlive the SpecStep; no slot has been used yet.
  static std::unique_ptr<SpecStep> Create(Drafter& drafter, Context& ctx, MemoryLayout layout,
                                          uint32_t n_ctx_per_slot);
  Rollback rollback() const { return rollback_; }

  // Before the call. The most tokens the slot's next draft may have, after clearing the last
  // step's draft: 0 for a request that turned speculation off, after a replay (one step's
  // pause), or where no more tokens fit.
  int32_t Room(Slot& slot);
  struct Want {
    Slot* slot;
    int32_t n_max;  // Room(*slot) > 0
  };
  // Drafts for every slot of `wants` together (Drafter::DraftAll) into SlotRun::draft.
  // Internal, with the drafter's exception, when it threw: the caller ends those requests.
  Status Draft(std::span<const Want> wants);
  // Keeps the slot's draft to verify with its next token (dropped when shorter than the
  // request's n_min) and the checkpoint its rollback needs (Rollback::kCheckpoint; no draft
  // when it cannot be taken).
  void Keep(Slot& slot);

  // After the call. What the target says of the slot's draft, decoded after its next token
  // from row `base` on: the tokens sampled while they equal the draft, and the one after. Each
  // is taken by `tokens` as it would be without speculation; the sequence keeps the decoded
  // tokens taken and the rest is taken back by Settle before the request may end, so it only
  // ever publishes committed state.
  Verdict Verify(Slot& slot, int32_t base, SlotTokens& tokens);
  // Takes back what the verdict left out of the sequence. An error leaves the sequence
  // unusable: the caller fails the request. The caller then ends the request if the verdict
  // says so.
  Status Settle(const Verdict& v);

 private:
  SpecStep(Drafter& drafter, Context& ctx, Rollback rollback, uint32_t n_ctx_per_slot)
      : drafter_(drafter), ctx_(ctx), rollback_(rollback), n_ctx_per_slot_(n_ctx_per_slot) {}

  Drafter& drafter_;
  Context& ctx_;
  const Rollback rollback_;
  const uint32_t n_ctx_per_slot_;
};

}  // namespace prefixd::engine
