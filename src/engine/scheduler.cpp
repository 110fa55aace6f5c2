#include "engine/scheduler.h"

#include <algorithm>
#include <deque>
#include <future>
#include <optional>
#include <atomic>
#include <thread>
#include <utility>

#include "engine/cache_io.h"
#include "engine/job.h"
#include "engine/prefill.h"
#include "engine/prefix_views.h"
#include "engine/prompt_decode.h"
#include "engine/worker_parts.h"
#include "util/log.h"
#include "util/mutex.h"

namespace prefixd::engine {

// The worker's parts (the context, the cache, the step units: WorkerParts) and the loop's state.
struct Scheduler::Impl : WorkerParts {
  const Model& model;
  EngineOptions options;
  Projector* projector = nullptr;  // the images' encoder (null: a model that reads none)

  mutable Mutex mu;
  CondVar cv;
  CondVar idle_cv;  // signalled when a slot becomes free
  std::deque<std::unique_ptr<Job>> queue PREFIXD_GUARDED_BY(mu);
  bool stopping PREFIXD_GUARDED_BY(mu) = false;
  EngineStats stats PREFIXD_GUARDED_BY(mu);
  // What GetStats shows of each slot (NoteSlot).
  std::vector<SlotView> slot_views PREFIXD_GUARDED_BY(mu);
  std::vector<Slot> slots;  // sized once; never reallocated
  std::thread worker;
  size_t next_prefill = 0;
  uint64_t admissions = 0;
  // ClearCache bumps it: a slot forgets what it holds when its sequence was filled before the
  // clear (idle slots at the next admission, busy ones when their request finishes).
  std::atomic<uint64_t> clear_epoch{0};
  uint64_t forgotten_epoch = 0;  // the clear the idle slots were last cleared for
  // Held from a request's answer to the end of its cache work: an eviction or a clear its
  // client sends after the answer comes after what that request publishes, not before it.
  Mutex publish_mu PREFIXD_ACQUIRED_BEFORE(mu);

  Impl(const Model& m, const EngineOptions& o) : model(m), options(o) {}

  void Run(std::promise<Status>& ready);
  Status Setup();
  void Loop();
  bool AwaitWork();
  bool Admit();
  bool AnyActive() const;
  Slot& PickSlot(std::span<const Token> tokens, const Digest& domain);
  void Start(Slot& slot, std::unique_ptr<Job> job, const Digest& domain,
             std::unique_ptr<Sampler> sampler);
  void Refuse(std::unique_ptr<Job> job, const Status& st);
  void Apply(Slot& slot, Restoration restoration);
  void ForgetHeld(Slot& slot);
  std::vector<int32_t> PlanPrefill(const Prompt& prompt) const;
  void CountCaptureErrors(const std::vector<Status>& failed);
  void PrefillStep(Slot& slot);
  void GenerateStep();
  void DraftAll();
  void Settle(const Verdict& v);
  void EndSampleFailure(Slot& slot, const Status& st);
  void PublishPrompt(Slot& slot);
  void SampleAndAccept(Slot& slot, int32_t logits_index);
  template <class Step>
  void Guarded(Slot& slot, Step&& step);
  void AbortSlot(Slot& slot, const std::string& what);
  void StartJob(std::unique_ptr<Job> job);
  void Finish(Slot& slot, FinishReason reason) PREFIXD_EXCLUDES(publish_mu);
  void NoteSlot(const Slot& slot) PREFIXD_EXCLUDES(mu);
  void NoteHeld(const Slot& slot, const Digest& domain, std::span<const Token> tokens);
  void Fail(Slot& slot, const Status& st);
  void FreeSlot() PREFIXD_EXCLUDES(mu);  // one slot fewer busy; wakes FlushDisk
  void CountCacheError(CacheWork what, const Status& st) PREFIXD_EXCLUDES(mu);
};

Scheduler::Scheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Everything that touches the llama context runs on the worker thread, set-up included: ggml's
// CPU backend (OpenMP) keeps a thread team for every thread that ever ran a graph, and a second
// team makes libgomp count more threads than cores and put its spinning workers to sleep around
// every op, which slowed every decode step. Context enforces it.
Result<std::unique_ptr<Scheduler>> Scheduler::Create(const Model& model,
                                                     const EngineOptions& options,
                                                     Projector* projector) {
  auto impl = std::make_unique<Impl>(model, options);
  impl->projector = projector;
  std::promise<Status> ready;
  std::future<Status> ready_future = ready.get_future();
  Impl* raw = impl.get();
  impl->worker = std::thread([raw, &ready] { raw->Run(ready); });
  Status st = ready_future.get();
  if (!st.ok()) {
    impl->worker.join();
    return st;
  }
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(impl)));
}

void Scheduler::Impl::Run(std::promise<Status>& ready) {
  Status st = Setup();
  const bool ok = st.ok();
  if (!ok) Release();  // the context is freed by the thread that used it
  ready.set_value(std::move(st));  // `ready` is gone after this
  if (!ok) return;
  Loop();
  Release();  // the context is freed by the thread that used it
}

Status Scheduler::Impl::Setup() {
  PREFIXD_RETURN_IF_ERROR(Build(model, options));
  slots.resize(options.n_slots);
  for (uint32_t i = 0; i < options.n_slots; ++i) slots[i].seq = int32_t(i);
  MutexLock lock(&mu);
  slot_views.resize(options.n_slots);
  if (spec) {
    stats.speculation = SpecTypesName(options.spec.types);
    stats.spec_rollback = RollbackName(spec->rollback());
  }
  return Status::OK();
}

Scheduler::~Scheduler() {
  {
    MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

Result<std::shared_ptr<Completion>> Scheduler::Start(CompletionRequest request) {
  const size_t n = request.prompt.tokens.size();
  if (n == 0) return Status::InvalidArgument("the prompt is empty");
  if (n + 1 > impl_->options.n_ctx_per_slot) {
    return Status::InvalidArgument("the prompt has " + std::to_string(n) +
                                   " tokens; the context holds " +
                                   std::to_string(impl_->options.n_ctx_per_slot));
  }
  auto job = std::make_unique<Job>();
  job->request = std::move(request);
  impl_->cache->Prefetch(*job);
  std::shared_ptr<Completion> completion = job->completion;
  {
    MutexLock lock(&impl_->mu);
    if (impl_->stopping) return Status::Aborted("the engine is shutting down");
    if (impl_->queue.size() >= impl_->options.max_queue) {
      return Status::ResourceExhausted("the request queue is full (" +
                                       std::to_string(impl_->options.max_queue) + " waiting)");
    }
    impl_->queue.push_back(std::move(job));
  }
  impl_->cv.notify_all();
  return completion;
}

EngineStats Scheduler::GetStats() const {
  MutexLock lock(&impl_->mu);
  EngineStats s = impl_->stats;
  s.queue_depth = uint32_t(impl_->queue.size());
  s.slots = impl_->slot_views;
  s.memory_layout = MemoryLayoutName(impl_->model.layout());
  s.devices = impl_->model.devices();
  if (Status b = impl_->model.BackendStatus(); !b.ok()) s.backend_lost = b.message();
  s.cache_type_k = KvTypeName(impl_->options.cache_type_k);
  s.cache_type_v = KvTypeName(impl_->options.cache_type_v);
  s.block_size = impl_->options.block_size;
  impl_->cache->AddStats(&s);
  return s;
}

std::string Scheduler::DomainIdOf(const std::string& tenant_salt) const {
  return ShortId(impl_->cache->DomainOf(tenant_salt));
}

std::vector<CachedPrefix> Scheduler::ListCachedPrefixes(const std::string* tenant_salt) const {
  return impl_->cache->List(tenant_salt);
}

Result<PrefixEviction> Scheduler::EvictCachedPrefix(const std::string& domain,
                                                    const std::string& root) {
  MutexLock published(&impl_->publish_mu);
  std::optional<cache::PrefixSummary> found = impl_->cache->Find(domain, root);
  if (!found) return Status::NotFound("no cached prefix " + domain + "/" + root);
  impl_->clear_epoch++;  // the slots holding it forget it (as after ClearCache)
  return impl_->cache->Evict(*found);
}

Status Scheduler::ClearCache() {
  MutexLock published(&impl_->publish_mu);
  impl_->clear_epoch++;  // nothing the slots hold now is reused
  return impl_->cache->Clear();
}

std::vector<store::RecordStore*> Scheduler::LowerStores() const {
  return impl_->cache ? impl_->cache->LowerStores() : std::vector<store::RecordStore*>{};
}

void Scheduler::FlushDisk() {
  {  // every request submitted so far has finished, its cache work included
    MutexLock lock(&impl_->mu);
    while (!impl_->queue.empty() || impl_->stats.slots_busy != 0) impl_->idle_cv.Wait(lock);
  }
  impl_->cache->Flush();
}

void Scheduler::Impl::Loop() {
  for (;;) {
    if (!AwaitWork()) break;
    if (Admit()) cache->NoteForegroundBusy(true);
    Slot* prefill = nullptr;
    for (size_t i = 0; i < slots.size() && prefill == nullptr; ++i) {
      Slot& s = slots[(next_prefill + i) % slots.size()];
      if (s.phase == Phase::kPrefill) prefill = &s;
    }
    if (prefill != nullptr) {
      next_prefill = (size_t(prefill->seq) + 1) % slots.size();
      Guarded(*prefill, [&] { PrefillStep(*prefill); });
    }
    GenerateStep();
    if (!AnyActive()) cache->NoteForegroundBusy(false);
  }
  for (Slot& s : slots) {
    if (s.phase != Phase::kIdle) Finish(s, FinishReason::kCancelled);
  }
  MutexLock lock(&mu);
  for (auto& job : queue) job->completion->Finish(Status::Aborted("the engine is shutting down"));
  queue.clear();
}

// Returns at once while a slot is busy. Idle, the cache first warms memory for the next
// requests' payloads, a few MiB at a time, a request (or the stop) arriving ending it; then
// waits. False: the engine is stopping.
bool Scheduler::Impl::AwaitWork() {
  bool warm = cache != nullptr;
  for (;;) {
    {
      MutexLock lock(&mu);
      if (stopping) return false;
      if (!queue.empty() || AnyActive()) return true;
      if (!warm) {
        cv.Wait(lock);
        continue;
      }
    }
    warm = cache->WarmOne([this] {
      MutexLock lock(&mu);
      return stopping || !queue.empty();
    });
  }
}

bool Scheduler::Impl::AnyActive() const {
  for (const Slot& s : slots) {
    if (s.phase != Phase::kIdle) return true;
  }
  return false;
}

bool Scheduler::Impl::Admit() {
  if (const uint64_t epoch = clear_epoch; epoch != forgotten_epoch) {
    forgotten_epoch = epoch;
    for (Slot& s : slots) {
      if (s.phase == Phase::kIdle) ForgetHeld(s);
    }
  }
  bool admitted = false;
  for (;;) {
    std::unique_ptr<Job> job;
    {
      MutexLock lock(&mu);
      if (queue.empty() || stats.slots_busy == slots.size()) break;
      job = std::move(queue.front());
      queue.pop_front();
      stats.slots_busy++;
    }
    StartJob(std::move(job));
    admitted = true;
  }
  return admitted;
}

void Scheduler::Impl::StartJob(std::unique_ptr<Job> job) {
  Slot* slot = nullptr;
  try {
    auto sampler = Sampler::Create(model, job->request.sampling);
    if (!sampler.ok()) return Refuse(std::move(job), sampler.status());
    Digest domain{};
    if (cache_io()) domain = cache->DomainOf(job->request.tenant_salt);
    slot = &PickSlot(job->request.prompt.tokens, domain);
    Start(*slot, std::move(job), domain, std::move(sampler).value());
  } catch (const std::exception& e) {
    if (job) return Refuse(std::move(job), Status::Internal(std::string("start: ") + e.what()));
    if (slot) AbortSlot(*slot, e.what());
  }
}

// Runs one step of `slot`'s request. Whatever it throws (llama.cpp, common's sampler or
// parser, the cache) fails that request alone; the loop and every other slot go on.
template <class Step>
void Scheduler::Impl::Guarded(Slot& slot, Step&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    AbortSlot(slot, e.what());
  } catch (...) {
    AbortSlot(slot, "unknown exception");
  }
}

// Ends `slot`'s request after an exception, wherever in its step it came: the answer may have
// been given already (Finish answers before its cache work), the sequence is cleared either
// way, since what it holds is unknown.
void Scheduler::Impl::AbortSlot(Slot& slot, const std::string& what) {
  Logf(LogLevel::kWarning, "slot %d: request failed: %s", int(slot.seq), what.c_str());
  captures->DropLastCall(slot);
  slot.run.publish_pending = false;
  if (!slot.run.job) return;
  slot.run.job->completion->Finish(Status::Internal("internal error: " + what));  // unless answered
  slot.run.job.reset();
  slot.phase = Phase::kIdle;
  ForgetHeld(slot);
  FreeSlot();
}

// Answers a job that never got a slot (its sampler could not be built).
void Scheduler::Impl::Refuse(std::unique_ptr<Job> job, const Status& st) {
  job->completion->Finish(st);
  FreeSlot();
}

// The idle slot of the session this prompt continues: the one whose held sequence serves the
// most of `tokens` in `domain` (HeldSequence::Continues). Another session that shares only a
// system prompt never takes a slot that holds more: it gets the least recently used idle slot,
// an empty one first, and restores the shared part from the cache instead.
// REQUIRES: an idle slot exists.
Slot& Scheduler::Impl::PickSlot(std::span<const Token> tokens, const Digest& domain) {
  Slot* best = nullptr;
  size_t best_shared = 0;
  for (Slot& s : slots) {
    if (s.phase != Phase::kIdle) continue;
    const size_t shared = s.held.Continues(tokens, domain);
    if (shared > best_shared) best = &s, best_shared = shared;
  }
  if (best != nullptr) return *best;
  for (Slot& s : slots) {
    if (s.phase != Phase::kIdle) continue;
    if (best == nullptr || s.held.tokens.empty() > best->held.tokens.empty() ||
        (s.held.tokens.empty() == best->held.tokens.empty() && s.last_used < best->last_used)) {
      best = &s;
    }
  }
  return *best;
}

void Scheduler::Impl::Start(Slot& slot, std::unique_ptr<Job> job, const Digest& domain,
                            std::unique_ptr<Sampler> sampler) {
  // forgotten_epoch: the clear its held tokens were checked against (Admit).
  slot.run = StartRun(std::move(job), domain, std::move(sampler), forgotten_epoch);
  SlotRun& run = slot.run;
  slot.phase = Phase::kPrefill;
  slot.last_used = ++admissions;
  NoteSlot(slot);
  run.chunk_ends = PlanPrefill(run.job->request.prompt);
  if (CacheIo* io = cache_io()) {
    if (Status st = cache->RememberDomain(run.domain); !st.ok()) {
      CountCacheError(CacheWork::kDomain, st);
    }
    Apply(slot, io->Restore(slot));
    run.result.usage.restore_ms = MillisSince(run.started);
  } else {
    ForgetHeld(slot);  // nothing restored: the run starts at 0
  }
  run.result.usage.cached_tokens = run.restored;
  run.result.usage.image_tokens_restored = ImageRowsBefore(run.job->request.prompt, run.restored);
  run.job->completion->NoteProgress(run.pos);
}

// The sequence now holds the request's own state, from what Restore kept or set.
void Scheduler::Impl::Apply(Slot& slot, Restoration restoration) {
  SlotRun& run = slot.run;
  run.restored = restoration.restored;
  run.pos = restoration.restored;
  run.result.usage.restored_bytes = restoration.restored_bytes;
  run.result.usage.mtp_restored_tokens = restoration.mtp_restored;
  run.result.cache = restoration.outcome;
  run.captures = std::move(restoration.captures);
  run.chunk_ends = std::move(restoration.chunk_ends);
  run.next_capture = 0;
  slot.held.tokens.clear();
  NoteHeld(slot, run.domain, std::span(run.job->request.prompt.tokens).first(size_t(run.pos)));
  run.job->prefetch.opened.reset();  // closes the record files
}

// The chunk schedule of `prompt` (PlanChunks): the same whether the cache is on or off. A model
// whose cache takes Snapshots at the ends of calls is cut at its capture points (decided by the
// layout, so that --no-cache plans the same); pure attention, and Snapshots captured inside
// calls, are not cut: the calls are the ubatches. Every image's bounds end calls, whatever the
// model (prompt_decode.h).
std::vector<int32_t> Scheduler::Impl::PlanPrefill(const Prompt& prompt) const {
  const int32_t n = int32_t(prompt.tokens.size());
  std::vector<int32_t> cuts;
  if (!capture_in_call && (options.whole_state || LayoutNeedsSnapshot(model.layout()))) {
    cuts = PrefillCuts(n, prompt.capture_points, SnapshotSpacing(options));
  }
  if (!prompt.images.empty()) {
    const std::vector<int32_t> images = ImageCuts(prompt);
    cuts.insert(cuts.end(), images.begin(), images.end());
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  }
  return PlanChunks(n, cuts, ctx->n_batch(), ctx->n_ubatch());
}

void Scheduler::Impl::PrefillStep(Slot& slot) {
  const CompletionRequest& req = slot.run.job->request;
  if (slot.run.job->completion->cancelled()) return Finish(slot, FinishReason::kCancelled);
  const auto& tokens = req.prompt.tokens;
  const int32_t n = int32_t(tokens.size());
  const int32_t stop = NextPlannedEnd(slot.run.chunk_ends, slot.run.pos);
  std::span<const Token> chunk(tokens.data() + slot.run.pos, size_t(stop - slot.run.pos));
  const CallCaptures in_call = captures->SetCallCaptures(slot, stop);
  const Clock::time_point t0 = Clock::now();
  Status st = DecodePromptRange(*ctx, projector, slot.seq, req.prompt, slot.run.pos, stop,
                                stop == n);
  slot.run.result.usage.prompt_eval_ms += MillisSince(t0);
  if (!st.ok()) captures->ClearCallCaptures(slot, in_call);
  if (!st.ok()) return Fail(slot, st);
  slot.run.result.usage.evaluated_tokens += int32_t(chunk.size());
  slot.run.result.usage.prefill_chunks++;
  slot.run.pos = stop;
  slot.run.job->completion->NoteProgress(stop);
  if (stop < n) return CountCaptureErrors(captures->CaptureThrough(slot, stop, in_call));
  slot.run.last_call = in_call;
  NoteHeld(slot, slot.run.domain, tokens);
  slot.run.result.usage.prefill_ms = MillisSince(slot.run.started);
  slot.run.decode_started = Clock::now();
  slot.phase = Phase::kGenerate;
  if (drafter) slot.run.history = tokens;
  slot.run.publish_pending = cache_io() != nullptr;
  // The first token goes out before the cache work: the last call's captures, then the publish.
  SampleAndAccept(slot, -1);
  if (slot.phase != Phase::kGenerate) return;  // it ended there: Finish read the captures
  CountCaptureErrors(captures->CaptureLastCall(slot));
  if (drafter) drafter->Begin(slot.seq, slot.run.domain, tokens);
  PublishPrompt(slot);
}

void Scheduler::Impl::CountCaptureErrors(const std::vector<Status>& failed) {
  for (const Status& st : failed) CountCacheError(CacheWork::kCapture, st);
}

// Publishes what the prefill produced, once; the sequence still holds exactly the prompt.
void Scheduler::Impl::PublishPrompt(Slot& slot) {
  if (!slot.run.publish_pending) return;
  slot.run.publish_pending = false;
  const Clock::time_point t0 = Clock::now();
  Status st = cache_io()->Publish(slot);
  slot.run.result.usage.publish_ms += MillisSince(t0);
  if (!st.ok()) CountCacheError(CacheWork::kPublish, st);
}

// Samples and takes the token: the request ends or the token is queued for decoding. A grammar that has run its course while ignore_eos masks the
// end of generation has no token left to allow: its end is the answer's end (finish "stop").
// Any other sampling failure fails this request alone.
void Scheduler::Impl::SampleAndAccept(Slot& slot, int32_t logits_index) {
  Result<Token> t = slot_tokens->Sample(slot, logits_index);
  if (!t.ok()) return EndSampleFailure(slot, t.status());
  if (std::optional<FinishReason> reason = slot_tokens->Take(slot, *t)) Finish(slot, *reason);
}

void Scheduler::Impl::EndSampleFailure(Slot& slot, const Status& st) {
  if (slot.run.sampler->has_grammar() && slot.run.job->request.sampling.ignore_eos) {
    return Finish(slot, FinishReason::kStop);
  }
  Fail(slot, st);
}

// One call for every generating slot: its next token, and the tokens drafted to follow it
// (verified in the same call; SpecStep::Verify).
void Scheduler::Impl::GenerateStep() {
  std::vector<BatchToken> batch;
  std::vector<Slot*> owners;
  std::vector<int32_t> first;  // each owner's first token in `batch`
  DraftAll();
  for (Slot& s : slots) {
    if (s.phase != Phase::kGenerate) continue;
    first.push_back(int32_t(batch.size()));
    batch.push_back({s.run.next_token, s.run.pos, s.seq, true});
    for (size_t i = 0; i < s.run.draft.size(); ++i) {
      batch.push_back({s.run.draft[i], s.run.pos + 1 + int32_t(i), s.seq, true});
    }
    owners.push_back(&s);
  }
  if (batch.empty()) return;
  Status st = ctx->DecodeBatch(batch);
  std::vector<Verdict> verdicts;
  for (size_t i = 0; i < owners.size(); ++i) {
    Slot& s = *owners[i];
    if (!st.ok()) {
      Fail(s, st);
      continue;
    }
    Guarded(s, [&] {
      if (!s.run.draft.empty()) return verdicts.push_back(spec->Verify(s, first[i], *slot_tokens));
      s.run.pos++;
      SampleAndAccept(s, first[i]);
    });
  }
  for (Verdict& v : verdicts) Guarded(*v.slot, [&] { Settle(v); });
}

// Every generating slot's draft, drafted together (SpecStep: Room, Draft, Keep).
void Scheduler::Impl::DraftAll() {
  if (!spec) return;
  std::vector<SpecStep::Want> wants;
  for (Slot& s : slots) {
    if (s.phase != Phase::kGenerate) continue;
    Guarded(s, [&] {
      if (const int32_t n_max = spec->Room(s); n_max > 0) wants.push_back({&s, n_max});
    });
  }
  if (wants.empty()) return;
  if (Status st = spec->Draft(wants); !st.ok()) {
    for (const SpecStep::Want& w : wants) AbortSlot(*w.slot, st.message());
    return;
  }
  for (const SpecStep::Want& w : wants) Guarded(*w.slot, [&] { spec->Keep(*w.slot); });
  if (drafter->draft_context() != nullptr) {
    MutexLock lock(&mu);
    stats.draft_prefill_tokens = drafter->draft_prefill_tokens();
    stats.draft_restored_tokens = drafter->draft_restored_tokens();
  }
}

// Takes back what the slot's verdict left out of the sequence, then ends the request if it
// ended.
void Scheduler::Impl::Settle(const Verdict& v) {
  Slot& slot = *v.slot;
  if (Status st = spec->Settle(v); !st.ok()) return Fail(slot, st);
  if (v.reason) return Finish(slot, *v.reason);
  if (!v.failed.ok()) EndSampleFailure(slot, v.failed);
}

void Scheduler::Impl::Finish(Slot& slot, FinishReason reason) {
  // A request that ends at its first token: its usage counts them.
  CountCaptureErrors(captures->CaptureLastCall(slot));
  Completion& completion = *slot.run.job->completion;
  CompletionResult& r = slot_tokens->Close(slot, reason);
  const CompletionResult counted = r;  // r goes to the client; the cache work reads this copy
  {
    MutexLock lock(&mu);  // before the answer: a /metrics read after it counts it
    CountRequest(stats, counted);
  }
  CacheIo* io = cache_io();
  const bool publish_generation = io && reason != FinishReason::kCancelled;
  MutexLock publishing(&publish_mu);
  completion.Finish(std::move(r));  // the client has its answer; the cache work follows
  PublishPrompt(slot);
  if (publish_generation) {
    Status st = io->PublishGeneration(slot, counted.tokens);
    if (!st.ok()) CountCacheError(CacheWork::kPublish, st);
  }
  if (io && slot.run.epoch == clear_epoch) {
    slot.held = HeldAfter(slot, counted.tokens);
  } else {
    ForgetHeld(slot);
  }
  slot.run.job.reset();
  slot.phase = Phase::kIdle;
  if (drafter) drafter->End(slot.seq);
  NoteSlot(slot);
  FreeSlot();  // after the cache work: FlushDisk waits for every slot to be free
}

void Scheduler::Impl::ForgetHeld(Slot& slot) {
  ctx->SeqClear(slot.seq);
  slot.held.tokens.clear();
  NoteSlot(slot);
}

void Scheduler::Impl::NoteSlot(const Slot& slot) {
  SlotView v = ViewOf(slot, cache_io() != nullptr, options.block_size);
  if (slot.phase == Phase::kIdle) NoteHeld(slot, slot.held.domain, slot.held.tokens);
  MutexLock lock(&mu);
  slot_views[size_t(&slot - slots.data())] = std::move(v);
}

// What the slot's sequence holds, for the KV-event stream: set where the sequence changes (the
// restore, the prefill's end) and for an idle slot whenever it is noted (the request's end,
// a slot that forgets).
void Scheduler::Impl::NoteHeld(const Slot& slot, const Digest& domain,
                               std::span<const Token> tokens) {
  if (cache_io() != nullptr) cache->NoteSlotHolds(slot.seq, domain, tokens);
}

void Scheduler::Impl::Fail(Slot& slot, const Status& st) {
  captures->DropLastCall(slot);
  slot.run.publish_pending = false;
  slot.run.job->completion->Finish(st);
  slot.run.job.reset();
  slot.phase = Phase::kIdle;
  if (drafter) drafter->End(slot.seq);
  ForgetHeld(slot);  // notes the idle slot
  FreeSlot();
}

void Scheduler::Impl::CountCacheError(CacheWork what, const Status& st) {
  Logf(LogLevel::kWarning, "cache %s failed: %s", CacheWorkName(what), st.ToString().c_str());
  MutexLock lock(&mu);
  stats.cache_errors[what]++;
}

void Scheduler::Impl::FreeSlot() {
  MutexLock lock(&mu);
  stats.slots_busy--;
  idle_cv.notify_all();
}

}  // namespace prefixd::engine
