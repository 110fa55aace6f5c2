// SlotTokens: what a generated token does to a slot's request. Sample picks it from the last
// call's logits (the request's sampler, end-of-generation masked for ignore_eos, logprobs noted
// when asked); Take streams its text to the client and says whether the request ends with it;
// Close ends the stream and the result.
// The batching loop calls both for a slot's next token; the speculation step (SpecStep) calls
// them for every drafted position it verifies, so a drafted token is taken exactly as it would
// be without speculation.
//
// Thread-safety: the scheduler thread only (it reads the context's logits).
#pragma once

#include <optional>
#include <vector>

#include "engine/context.h"
#include "engine/job.h"
#include "engine/model/model.h"
#include "util/status.h"

namespace prefixd::engine {

class SlotTokens {
 public:
  // `speculating`: Take keeps the tokens before the next one in SlotRun::history (what a
  // drafter reads). REQUIRES: model and ctx outlive this object.
  SlotTokens(const Model& model, Context& ctx, uint32_t n_ctx_per_slot, bool speculating);

  // The token sampled for `slot` from the logits of row `logits_index` (-1: the last) of the
  // last call. The logits are the caller's until the next decode and are masked in place.
  Result<Token> Sample(Slot& slot, int32_t logits_index);
  // Takes `t` as the slot's next token: the reason the request ends with it, if it does (an
  // end of generation, a cancelled client, a stop word, max_tokens or a full context); else
  // the token is queued for decoding (SlotRun::next_token).
  std::optional<FinishReason> Take(Slot& slot, Token t);
  // Ends the request's text stream: the text it held back (a possible stop word's start) goes
  // to the client unless the request was cancelled, and the request's result gets the reason,
  // the text, the stop word and the token counts. Returns the result, for the caller to answer.
  CompletionResult& Close(Slot& slot, FinishReason reason);

 private:
  void NoteLogprobs(Slot& slot, const float* logits, Token t);
  bool RenderSpecial(const Slot& slot, Token t) const;

  const Model& model_;
  Context& ctx_;
  uint32_t n_ctx_per_slot_;
  const bool speculating_;
  std::vector<Token> eog_tokens_;  // masked for requests with ignore_eos
};

}  // namespace prefixd::engine
