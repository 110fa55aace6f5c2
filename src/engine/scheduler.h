// Scheduler: owns the llama context, the slots and the prompt cache, and runs every request on
// one worker thread with continuous batching: each step decodes one prefill chunk of one slot
// (chunks end at capture points) or one token for every generating slot in a single batch.
// The loop keeps admission and which slot holds what; what a slot does in its step lives in
// the units it calls (WorkerParts: SpecStep, PrefillCaptures, SlotTokens).
//
// Thread-safety: Start(), GetStats() and ClearCache() may be called from any thread. The
// worker thread is the only one touching the context, the slots and the sequences.
#pragma once

#include <memory>

#include "engine/completion.h"
#include "engine/options.h"
#include "engine/stats.h"
#include "engine/model/model.h"
#include "store/record_store.h"

namespace prefixd::engine {

class Projector;

class Scheduler {
 public:
  // REQUIRES: model (and projector, when not null) outlive the scheduler. The projector
  // decodes the images of prompts that hold some (prompt_decode.h).
  static Result<std::unique_ptr<Scheduler>> Create(const Model& model,
                                                   const EngineOptions& options,
                                                   Projector* projector = nullptr);
  ~Scheduler();  // finishes queued and running requests as cancelled, joins the worker

  // Queues the request and returns its running Completion (Engine::Start). ResourceExhausted
  // when the queue is full, InvalidArgument when the prompt is empty or does not fit a slot's
  // context, Aborted when the engine is shutting down.
  Result<std::shared_ptr<Completion>> Start(CompletionRequest request);
  EngineStats GetStats() const;
  // Drops every tier's entries; the idle slots forget the sequences they hold before the next
  // request is admitted, so nothing cleared is reused.
  Status ClearCache();
  // Engine::ListCachedPrefixes / EvictCachedPrefix.
  std::vector<CachedPrefix> ListCachedPrefixes(const std::string* tenant_salt) const;
  std::string DomainIdOf(const std::string& tenant_salt) const;
  Result<PrefixEviction> EvictCachedPrefix(const std::string& domain, const std::string& root);
  // CacheStack::LowerStores (none with the cache off). Valid while the scheduler lives.
  std::vector<store::RecordStore*> LowerStores() const;
  // Waits until everything published so far is on disk (no-op without a disk tier).
  void FlushDisk();

 private:
  struct Impl;
  explicit Scheduler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::engine
