#include "engine/spec_step.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "util/log.h"

namespace prefixd::engine {

std::unique_ptr<SpecStep> SpecStep::Create(Drafter& drafter, Context& ctx, MemoryLayout layout,
                                           uint32_t n_ctx_per_slot) {
  const Rollback rollback = ProbeRollback(ctx, layout);
  if (rollback == Rollback::kNone) {
    Logf(LogLevel::kWarning,
         "speculation off: the %s memory of this model cannot drop rejected drafts exactly",
         MemoryLayoutName(layout));
    return nullptr;
  }
  return std::unique_ptr<SpecStep>(new SpecStep(drafter, ctx, rollback, n_ctx_per_slot));
}

int32_t SpecStep::Room(Slot& slot) {
  SlotRun& run = slot.run;
  run.draft.clear();
  run.checkpoint.clear();
  if (std::exchange(run.draft_pause, false)) return 0;
  const CompletionRequest& req = run.job->request;
  const int32_t wanted = req.spec_n_max >= 0 ? req.spec_n_max : drafter_.n_max();
  const int32_t room = std::min(req.max_tokens - int32_t(run.result.tokens.size()) - 1,
                                int32_t(n_ctx_per_slot_) - run.pos - 2);
  return std::min(wanted, room);
}

Status SpecStep::Draft(std::span<const Want> wants) {
  std::vector<Drafter::Want> drafts;
  for (const Want& w : wants) {
    SlotRun& run = w.slot->run;
    drafts.push_back({w.slot->seq, &run.history, run.next_token, run.pos, w.n_max, &run.draft});
  }
  try {
    drafter_.DraftAll(drafts);
  } catch (const std::exception& e) {
    return Status::Internal(e.what());
  }
  return Status::OK();
}

void SpecStep::Keep(Slot& slot) {
  SlotRun& run = slot.run;
  const CompletionRequest& req = run.job->request;
  if (int32_t(run.draft.size()) < std::max(req.spec_n_min, 1)) return run.draft.clear();
  if (rollback_ != Rollback::kCheckpoint) return;
  Result<std::vector<uint8_t>> checkpoint = ctx_.GetState(slot.seq, StatePart::kPartial);
  if (!checkpoint.ok()) {  // no draft then: one token, as without speculation
    Logf(LogLevel::kWarning, "speculation checkpoint failed: %s",
         checkpoint.status().ToString().c_str());
    return run.draft.clear();
  }
  run.checkpoint = std::move(checkpoint).value();
}

namespace {

// The request's counters of what it drafted and what the target took (Usage::draft_*); the
// digest is FNV-1a over each drafted token's bytes.
void CountDraft(Usage& usage, std::span<const Token> draft, size_t accepted) {
  usage.draft_tokens += int32_t(draft.size());
  for (Token t : draft) {
    for (int b = 0; b < 4; ++b) {
      usage.draft_digest = (usage.draft_digest ^ ((uint32_t(t) >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    }
  }
  usage.draft_accepted += int32_t(accepted);
  usage.draft_steps++;
}

}  // namespace

Verdict SpecStep::Verify(Slot& slot, int32_t base, SlotTokens& tokens) {
  SlotRun& run = slot.run;
  Verdict v;
  v.slot = &slot;
  v.pos0 = run.pos;
  v.decoded = {run.next_token};
  v.decoded.insert(v.decoded.end(), run.draft.begin(), run.draft.end());
  const std::vector<Token> draft = std::move(run.draft);
  run.draft.clear();
  std::vector<Token> sampled;
  for (size_t j = 0; j <= draft.size(); ++j) {
    Result<Token> t = tokens.Sample(slot, base + int32_t(j));
    if (!t.ok()) {
      v.failed = t.status();
      break;
    }
    sampled.push_back(*t);
    if (j == draft.size() || *t != draft[j]) break;
  }
  const size_t accepted = v.failed.ok() ? sampled.size() - 1 : sampled.size();
  run.pos = v.pos0 + 1;  // the next token is decoded
  for (size_t j = 0; j < sampled.size() && !v.reason; ++j) {
    v.reason = tokens.Take(slot, sampled[j]);
    if (!v.reason && j < accepted) run.pos++;  // a draft token: decoded already
  }
  drafter_.Accept(slot.seq, int32_t(accepted));
  CountDraft(run.result.usage, draft, accepted);
  return v;
}

Status SpecStep::Settle(const Verdict& v) {
  Slot& slot = *v.slot;
  SlotRun& run = slot.run;
  if (rollback_ == Rollback::kCheckpoint && run.pos < v.pos0 + int32_t(v.decoded.size())) {
    run.result.usage.draft_replays++;
    // llama-server replays in a step of its own, without a draft; the next step does the same
    // here, so that both draft at the same positions (the same acceptance) and a drafter
    // that just failed is not asked again at once.
    run.draft_pause = true;
  }
  Status st = RollBack(ctx_, rollback_, slot.seq, v.pos0, v.decoded, run.pos, run.checkpoint);
  run.checkpoint.clear();
  return st;
}

}  // namespace prefixd::engine
