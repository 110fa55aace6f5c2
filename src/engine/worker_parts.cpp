#include "engine/worker_parts.h"

#include <string>

#include "util/log.h"

namespace prefixd::engine {

ContextOptions ContextOptionsFor(const Model& model, const EngineOptions& options) {
  ContextOptions copt;
  copt.n_ctx_per_seq = options.n_ctx_per_slot;
  copt.n_seq = options.n_slots;
  copt.n_batch = options.n_batch;
  copt.n_ubatch = options.n_ubatch;
  copt.n_threads = options.n_threads;
  copt.n_threads_batch = options.n_threads_batch;
  copt.flash_attn = options.flash_attn;
  copt.type_k = options.cache_type_k;
  copt.type_v = options.cache_type_v;
  copt.swa_full = options.swa_full || model.layout() != MemoryLayout::kIswa;
  return copt;
}

namespace {

// Decides how rejected drafts are taken back on this model's memory (SpecStep::Create), or
// turns speculation off for a memory that cannot take them back exactly; then lets the cache
// keep what the Drafter's contexts hold of a prefix.
Status SetUpSpeculation(WorkerParts& w, const Model& model, const EngineOptions& options) {
  if (!w.drafter) return Status::OK();
  w.spec = SpecStep::Create(*w.drafter, *w.ctx, model.layout(), options.n_ctx_per_slot);
  if (!w.spec) {
    w.drafter.reset();
    return Status::OK();
  }
  const std::string types = SpecTypesName(options.spec.types);
  Logf(LogLevel::kInfo, "speculation: %s, drafts of up to %d tokens, rollback by %s%s",
       types.c_str(), w.drafter->n_max(), RollbackName(w.spec->rollback()),
       w.ctx->n_rs_seq() > 0 ? " (per-token recurrent states)" : "");
  Drafter& drafter = *w.drafter;
  if (drafter.mtp_head() != nullptr) PREFIXD_RETURN_IF_ERROR(w.cache->AttachMtpSidecar(drafter));
  if (drafter.draft_context() != nullptr) PREFIXD_RETURN_IF_ERROR(w.cache->AttachDraftHistory(drafter));
  return Status::OK();
}

}  // namespace

Status WorkerParts::Build(const Model& model, const EngineOptions& options) {
  ContextOptions copt = ContextOptionsFor(model, options);
  if (options.spec.enabled()) {
    PREFIXD_ASSIGN_OR_RETURN(drafter, Drafter::Create(options.spec, options.n_slots));
    copt.n_rs_seq = RecurrentSnapshotsFor(drafter->n_max());
  }
  ContextOptions main_copt = copt;
  // Recurrent states kept inside one prefill call: 16 covers the message points, their
  // variants and the Block grid of a 512-token call; a call with more drops the rest (reuse
  // granularity, not correctness). Each is one sequence's recurrent state of memory.
  if (options.capture_in_call) main_copt.n_rs_capture = 16;
  PREFIXD_ASSIGN_OR_RETURN(ctx, Context::Create(model, main_copt));
  if (drafter && drafter->needs_draft_model()) {
    PREFIXD_RETURN_IF_ERROR(drafter->AttachDraftModel(*ctx, copt));
  }
  if (drafter && drafter->needs_mtp_head()) {
    PREFIXD_RETURN_IF_ERROR(drafter->AttachMtpHead(*ctx, copt));
  }
  EngineOptions cache_options = options;
  // The MTP head's carry is read at the end of a call: with draft-mtp, calls end at captures.
  cache_options.capture_in_call &= !(drafter && drafter->needs_mtp_head());
  PREFIXD_ASSIGN_OR_RETURN(cache, CacheStack::Create(model, *ctx, copt, cache_options));
  capture_in_call = cache->capture_in_call();
  captures = std::make_unique<PrefillCaptures>(*ctx, cache->io(), capture_in_call);
  PREFIXD_RETURN_IF_ERROR(SetUpSpeculation(*this, model, options));
  slot_tokens = std::make_unique<SlotTokens>(model, *ctx, options.n_ctx_per_slot, drafter != nullptr);
  return Status::OK();
}

void WorkerParts::Release() {
  slot_tokens.reset();
  captures.reset();
  if (cache) cache->ReleaseIo();
  spec.reset();
  drafter.reset();  // its draft model's context belongs to this thread too
  ctx.reset();
}

}  // namespace prefixd::engine
