#include "engine/slot_tokens.h"

#include <algorithm>
#include <cmath>

namespace prefixd::engine {

SlotTokens::SlotTokens(const Model& model, Context& ctx, uint32_t n_ctx_per_slot,
                       bool speculating)
    : model_(model), ctx_(ctx), n_ctx_per_slot_(n_ctx_per_slot), speculating_(speculating) {
  for (Token t = 0; t < model.n_vocab(); ++t) {
    if (model.IsEndOfGeneration(t)) eog_tokens_.push_back(t);
  }
}

Result<Token> SlotTokens::Sample(Slot& slot, int32_t logits_index) {
  float* logits = const_cast<float*>(ctx_.Logits(logits_index));  // ours until the next decode
  if (slot.run.job->request.sampling.ignore_eos) {
    for (Token t : eog_tokens_) logits[t] = -INFINITY;
  }
  PREFIXD_ASSIGN_OR_RETURN(const Token t, slot.run.sampler->Sample(ctx_.raw(), logits_index));
  if (slot.run.job->request.sampling.top_logprobs >= 0 && !model_.IsEndOfGeneration(t)) {
    NoteLogprobs(slot, logits, t);
  }
  return t;
}

void SlotTokens::NoteLogprobs(Slot& slot, const float* logits, Token t) {
  TokenLogprobs lp =
      ComputeLogprobs(logits, model_.n_vocab(), t, slot.run.job->request.sampling.top_logprobs);
  lp.chosen.piece = model_.TokenPiece(t, RenderSpecial(slot, t));
  for (TokenProb& p : lp.top) p.piece = model_.TokenPiece(p.token, RenderSpecial(slot, p.token));
  slot.run.result.logprobs.push_back(std::move(lp));
}

// Control tokens render as nothing, except those the reply's parser needs (preserved tokens,
// e.g. gpt-oss <|channel|>), which render as their text.
bool SlotTokens::RenderSpecial(const Slot& slot, Token t) const {
  const auto& special = slot.run.job->request.prompt.output.special_tokens;
  return std::find(special.begin(), special.end(), t) != special.end();
}

std::optional<FinishReason> SlotTokens::Take(Slot& slot, Token t) {
  SlotRun& run = slot.run;
  const CompletionRequest& req = run.job->request;
  if (model_.IsEndOfGeneration(t)) return FinishReason::kStop;
  run.result.tokens.push_back(t);
  std::string piece = run.stream->Push(model_.TokenPiece(t, RenderSpecial(slot, t)));
  if (!run.job->completion->Put(piece)) return FinishReason::kCancelled;
  if (run.stream->stopped()) return FinishReason::kStop;
  if (int(run.result.tokens.size()) >= req.max_tokens) return FinishReason::kLength;
  if (run.pos + 1 >= int32_t(n_ctx_per_slot_)) return FinishReason::kLength;
  if (speculating_ && run.next_token >= 0) run.history.push_back(run.next_token);
  run.next_token = t;
  return std::nullopt;
}

CompletionResult& SlotTokens::Close(Slot& slot, FinishReason reason) {
  std::string tail = slot.run.stream->Finish();
  if (reason != FinishReason::kCancelled) slot.run.job->completion->Put(tail);
  CompletionResult& r = slot.run.result;
  r.finish_reason = reason;
  r.text = slot.run.stream->text();
  r.stop_word = slot.run.stream->stop_word();
  r.usage.completion_tokens = int32_t(r.tokens.size());
  if (slot.phase == Phase::kGenerate) r.usage.decode_ms = MillisSince(slot.run.decode_started);
  return r;
}

}  // namespace prefixd::engine
