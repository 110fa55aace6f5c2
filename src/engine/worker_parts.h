// WorkerParts: what the scheduler's worker thread builds before its batching loop and frees
// after it. The llama context with its sequences (one per slot), the speculation's Drafter on
// it (its draft model or MTP head; the context keeps the per-token recurrent states its
// rollback needs), the prompt cache (CacheStack), and the units the loop calls for a slot's
// step: SpecStep (speculation), PrefillCaptures (capture bookkeeping) and SlotTokens
// (sampling and taking a token).
//
// Thread-safety: Build and Release run on the worker thread, which alone touches these parts,
// except `cache`, whose prefetch, stats, listing, eviction, clear and flush any thread may call
// (CacheStack). ggml's CPU backend keeps a thread team per thread that ran a graph, so the
// context is built, used and freed by one thread.
#pragma once

#include <memory>

#include "engine/cache_stack.h"
#include "engine/context.h"
#include "engine/options.h"
#include "engine/prefill_captures.h"
#include "engine/slot_tokens.h"
#include "engine/spec_step.h"
#include "engine/speculation.h"
#include "engine/model/model.h"
#include "util/status.h"

namespace prefixd::engine {

// The context's options for `options` on `model`: an iswa model's window cache a window plus a
// ubatch unless --swa-full (EngineOptions::swa_full), every other model's as large as the context.
ContextOptions ContextOptionsFor(const Model& model, const EngineOptions& options);

struct WorkerParts {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<CacheStack> cache;  // off (io() null) with --no-cache
  std::unique_ptr<Drafter> drafter;   // null: no speculation
  std::unique_ptr<SpecStep> spec;     // set exactly when drafter is
  bool capture_in_call = false;  // Snapshots captured inside calls (CacheStack::capture_in_call)
  std::unique_ptr<PrefillCaptures> captures;
  std::unique_ptr<SlotTokens> slot_tokens;

  // Builds every part for `options`. Speculation is turned off (drafter and spec null, a
  // warning logged) when the model's memory cannot take rejected drafts back exactly. On an
  // error the caller calls Release.
  // REQUIRES: model outlives the parts; called once, on the worker thread.
  Status Build(const Model& model, const EngineOptions& options);
  // Frees what touches the context, on the thread that used it: the step units, the cache's
  // I/O (the cache itself stays for the other threads' calls), the Drafter's contexts and the
  // context.
  void Release();
  CacheIo* cache_io() const { return cache ? cache->io() : nullptr; }
};

}  // namespace prefixd::engine
