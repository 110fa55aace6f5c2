#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <future>
#include <optional>
#include <atomic>
#include <set>
#include <thread>
#include <utility>

#include "engine/cache_io.h"
#include "engine/cache_stack.h"
#include "engine/context.h"
#include "engine/job.h"
#include "engine/prefill.h"
#include "engine/prefix_views.h"
#include "engine/speculation.h"
#include "util/log.h"
#include "util/mutex.h"

namespace prefixd::engine {

namespace {

// What Verify took of a slot's draft, applied by Settle once every slot of the call has read
// its logits: a checkpoint's replay is a decode of its own, after which the call's are gone.
struct Verdict {
  Slot* slot = nullptr;
  int32_t pos0 = 0;             // where the call's tokens for this slot start
  std::vector<Token> decoded;   // the next token and the draft, as decoded
  std::optional<FinishReason> reason;  // the request ends (after the rollback)
  Status failed;                // sampling failed after the tokens taken
};

}  // namespace

struct Scheduler::Impl {
  const Model& model;
  EngineOptions options;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<CacheStack> cache;  // set by Setup; off (io() null) with --no-cache
  std::unique_ptr<Drafter> drafter;   // null: no speculation
  Rollback rollback = Rollback::kNone;
  bool capture_in_call = false;  // Snapshots captured inside calls (CacheStack::capture_in_call)

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

  CacheIo* cache_io() const { return cache ? cache->io() : nullptr; }
  void Run(std::promise<Status>& ready);
  Status Setup();
  void ReleaseContext();
  void Loop();
  bool AwaitWork();
  bool Admit();
  bool AnyActive() const;
  Slot& PickSlot(std::span<const Token> tokens, const Digest& domain);
  void Start(Slot& slot, std::unique_ptr<Job> job, const Digest& domain,
             std::unique_ptr<Sampler> sampler);
  void Refuse(std::unique_ptr<Job> job, const Status& st);
  void Apply(Slot& slot, Restoration restoration);
  void KeepHeld(Slot& slot, std::span<const Token> generated);
  void ForgetHeld(Slot& slot);
  std::vector<int32_t> PlanPrefill(const Prompt& prompt) const;
  CallCaptures SetCallCaptures(const Slot& slot, int32_t stop);
  void CaptureThrough(Slot& slot, int32_t stop, const CallCaptures& in_call);
  void CaptureLastCall(Slot& slot);
  void DropLastCall(Slot& slot);
  void PrefillStep(Slot& slot);
  void GenerateStep();
  void Accept(Slot& slot, Token t);
  std::optional<FinishReason> Take(Slot& slot, Token t);
  Status SetUpSpeculation();
  void DraftAll();
  int32_t DraftRoom(Slot& slot);
  void KeepDraft(Slot& slot);
  Verdict Verify(Slot& slot, int32_t base);
  void Settle(Verdict& v);
  void EndSampleFailure(Slot& slot, const Status& st);
  void PublishPrompt(Slot& slot);
  Result<Token> SampleFor(Slot& slot, int32_t logits_index);
  void SampleAndAccept(Slot& slot, int32_t logits_index);
  template <class Step>
  void Guarded(Slot& slot, Step&& step);
  void AbortSlot(Slot& slot, const std::string& what);
  void StartJob(std::unique_ptr<Job> job);
  void NoteLogprobs(Slot& slot, const float* logits, Token t);
  bool RenderSpecial(const Slot& slot, Token t) const;
  std::vector<Token> eog_tokens;  // masked for requests with ignore_eos
  void Finish(Slot& slot, FinishReason reason) PREFIXD_EXCLUDES(publish_mu);
  void NoteSlot(const Slot& slot) PREFIXD_EXCLUDES(mu);
  void Fail(Slot& slot, const Status& st);
  void CountRequest(const CompletionResult& r) PREFIXD_EXCLUDES(mu);
  void FreeSlot() PREFIXD_EXCLUDES(mu);  // one slot fewer busy; wakes FlushDisk
  void CountCacheError(CacheWork what, const Status& st) PREFIXD_EXCLUDES(mu);
};

Scheduler::Scheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Everything that touches the llama context runs on the worker thread, set-up included: ggml's
// CPU backend (OpenMP) keeps a thread team for every thread that ever ran a graph, and a second
// team makes libgomp count more threads than cores and put its spinning workers to sleep around
// every op, which slowed every decode step. Context enforces it.
Result<std::unique_ptr<Scheduler>> Scheduler::Create(const Model& model,
                                                     const EngineOptions& options) {
  auto impl = std::make_unique<Impl>(model, options);
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
  if (!ok) ReleaseContext();
  ready.set_value(std::move(st));  // `ready` is gone after this
  if (!ok) return;
  Loop();
  ReleaseContext();
}

// The context is freed by the thread that used it.
void Scheduler::Impl::ReleaseContext() {
  if (cache) cache->ReleaseIo();
  drafter.reset();  // its draft model's context belongs to this thread too
  ctx.reset();
}

Status Scheduler::Impl::Setup() {
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
  slots.resize(options.n_slots);
  for (Token t = 0; t < model.n_vocab(); ++t) {
    if (model.IsEndOfGeneration(t)) eog_tokens.push_back(t);
  }
  for (uint32_t i = 0; i < options.n_slots; ++i) slots[i].seq = int32_t(i);
  {
    MutexLock lock(&mu);
    slot_views.resize(options.n_slots);
  }
  EngineOptions cache_options = options;
  // The MTP head's carry is read at the end of a call: with draft-mtp, calls end at captures.
  cache_options.capture_in_call &= !(drafter && drafter->needs_mtp_head());
  PREFIXD_ASSIGN_OR_RETURN(cache, CacheStack::Create(model, *ctx, copt, cache_options));
  capture_in_call = cache->capture_in_call();
  return SetUpSpeculation();
}

// Decides how rejected drafts are taken back on this model's memory (ProbeRollback), or turns
// speculation off for a memory that cannot take them back exactly.
Status Scheduler::Impl::SetUpSpeculation() {
  if (!drafter) return Status::OK();
  rollback = ProbeRollback(*ctx, model.layout());
  const std::string types = SpecTypesName(options.spec.types);
  if (rollback == Rollback::kNone) {
    Logf(LogLevel::kWarning,
         "speculation off: the %s memory of this model cannot drop rejected drafts exactly",
         MemoryLayoutName(model.layout()));
    drafter.reset();
    return Status::OK();
  }
  Logf(LogLevel::kInfo, "speculation: %s, drafts of up to %d tokens, rollback by %s%s", types.c_str(),
       drafter->n_max(), RollbackName(rollback),
       ctx->n_rs_seq() > 0 ? " (per-token recurrent states)" : "");
  if (drafter->mtp_head() != nullptr) PREFIXD_RETURN_IF_ERROR(cache->AttachMtpSidecar(*drafter));
  if (drafter->draft_context() != nullptr) PREFIXD_RETURN_IF_ERROR(cache->AttachDraftHistory(*drafter));
  MutexLock lock(&mu);
  stats.speculation = types;
  stats.spec_rollback = RollbackName(rollback);
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
  DropLastCall(slot);
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

namespace {

size_t SharedPrefix(std::span<const Token> a, std::span<const Token> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

// The idle slot of the session this prompt continues: the one whose held tokens share the most
// with `tokens` in `domain`, if they share at least that slot's last prompt up to its last
// capture point (all but the generation prompt, which the next turn's history renders
// otherwise): a continuing turn, an exact repeat, an edited last message. Another session that
// shares only a system prompt never takes a slot that holds more: it gets the least recently
// used idle slot, an empty one first, and restores the shared part from the cache instead.
// REQUIRES: an idle slot exists.
Slot& Scheduler::Impl::PickSlot(std::span<const Token> tokens, const Digest& domain) {
  Slot* best = nullptr;
  size_t best_shared = 0;
  for (Slot& s : slots) {
    if (s.phase != Phase::kIdle || s.held.domain != domain || s.held.tokens.empty()) continue;
    const size_t shared = SharedPrefix(s.held.tokens, tokens);
    const bool continues = shared == s.held.tokens.size() || shared >= s.held.tail;
    if (continues && shared > best_shared) best = &s, best_shared = shared;
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
  slot.run = SlotRun{};
  SlotRun& run = slot.run;
  run.job = std::move(job);
  run.domain = domain;
  run.result.usage.queue_ms = MillisSince(run.job->submitted);
  run.result.usage.prefetch_ms = run.job->prefetch_ms;
  run.result.usage.prompt_tokens = int32_t(run.job->request.prompt.tokens.size());
  run.started = Clock::now();
  run.sampler = std::move(sampler);
  run.stream.emplace(run.job->request.stop);
  run.epoch = forgotten_epoch;  // the clear its held tokens were checked against (Admit)
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
  run.job->prefetch.opened.reset();  // closes the record files
}

// The chunk schedule of `prompt` (PlanChunks): the same whether the cache is on or off. A model
// whose cache takes Snapshots at the ends of calls is cut at its capture points (decided by the
// layout, so that --no-cache plans the same); pure attention, and Snapshots captured inside
// calls, are not cut: the calls are the ubatches.
std::vector<int32_t> Scheduler::Impl::PlanPrefill(const Prompt& prompt) const {
  const int32_t n = int32_t(prompt.tokens.size());
  std::vector<int32_t> cuts;
  if (!capture_in_call && (options.whole_state || LayoutNeedsSnapshot(model.layout()))) {
    cuts = PrefillCuts(n, prompt.capture_points, SnapshotSpacing(options));
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
  const CallCaptures in_call = SetCallCaptures(slot, stop);
  const Clock::time_point t0 = Clock::now();
  Status st = ctx->DecodeChunk(slot.seq, chunk, slot.run.pos, stop == n);
  slot.run.result.usage.prompt_eval_ms += MillisSince(t0);
  if (!st.ok() && in_call.set > 0) ctx->SetCallCaptures(slot.seq, {});
  if (!st.ok()) return Fail(slot, st);
  slot.run.result.usage.evaluated_tokens += int32_t(chunk.size());
  slot.run.result.usage.prefill_chunks++;
  slot.run.pos = stop;
  slot.run.job->completion->NoteProgress(stop);
  if (stop < n) return CaptureThrough(slot, stop, in_call);
  slot.run.last_call = in_call;
  slot.run.result.usage.prefill_ms = MillisSince(slot.run.started);
  slot.run.decode_started = Clock::now();
  slot.phase = Phase::kGenerate;
  if (drafter) slot.run.history = tokens;
  slot.run.publish_pending = cache_io() != nullptr;
  // The first token goes out before the cache work: the last call's captures, then the publish.
  SampleAndAccept(slot, -1);
  if (slot.phase != Phase::kGenerate) return;  // it ended there: Finish read the captures
  CaptureLastCall(slot);
  if (drafter) drafter->Begin(slot.seq, slot.run.domain, tokens);
  PublishPrompt(slot);
}

// Takes every capture point up to `stop`, the end of the call just decoded: a Snapshot at a
// planned end is read from the sequence, one inside the call from the call's captures (those
// past its capacity are dropped), and Tails of pure attention are sliced from the rows at
// publish time. Then lets the call's captures go.
void Scheduler::Impl::CaptureThrough(Slot& slot, int32_t stop, const CallCaptures& in_call) {
  CacheIo* io = cache_io();
  const Clock::time_point t_capture = Clock::now();
  const int32_t captured_before = slot.run.result.usage.captures;
  for (; io && slot.run.next_capture < slot.run.captures.size() &&
         slot.run.captures[slot.run.next_capture].pos <= stop;
       ++slot.run.next_capture) {
    const CapturePoint& point = slot.run.captures[slot.run.next_capture];
    const size_t k = slot.run.next_capture;
    const bool kept = k >= in_call.first && k < in_call.first + size_t(in_call.set);
    if (point.pos < stop && !kept && capture_in_call) continue;  // past the capacity
    Status cst = io->Capture(slot, point, point.pos < stop && kept ? int32_t(k - in_call.first) : -1);
    // A failed capture costs reuse later, never correctness.
    if (!cst.ok()) CountCacheError(CacheWork::kCapture, cst);
    slot.run.result.usage.captures += cst.ok();
  }
  if (slot.run.result.usage.captures > captured_before) {
    slot.run.result.usage.capture_ms += MillisSince(t_capture);
  }
  if (in_call.set > 0) ctx->SetCallCaptures(slot.seq, {});
}

// The last prefill call's captures (SlotRun::last_call), once: before anything decodes past
// the prompt.
void Scheduler::Impl::CaptureLastCall(Slot& slot) {
  if (std::optional<CallCaptures> in_call = std::exchange(slot.run.last_call, std::nullopt)) {
    CaptureThrough(slot, slot.run.pos, *in_call);
  }
}

// A request that fails after its last prefill call lets the call's captures go unread.
void Scheduler::Impl::DropLastCall(Slot& slot) {
  std::optional<CallCaptures> in_call = std::exchange(slot.run.last_call, std::nullopt);
  if (in_call && in_call->set > 0) ctx->SetCallCaptures(slot.seq, {});
}

// Asks the context to keep the slot's state at the capture points strictly inside the call
// [pos, stop), in the order the captures come: the last of them where there are more than a
// call keeps (a chat's tail and its latest messages are what a next turn restores). None where
// Snapshots end calls.
CallCaptures Scheduler::Impl::SetCallCaptures(const Slot& slot, int32_t stop) {
  CallCaptures out{slot.run.next_capture, 0};
  if (!capture_in_call || cache_io() == nullptr) return out;
  std::vector<int32_t> inside;
  for (size_t i = slot.run.next_capture;
       i < slot.run.captures.size() && slot.run.captures[i].pos < stop; ++i) {
    inside.push_back(slot.run.captures[i].pos);
  }
  const size_t cap = size_t(std::max(ctx->CallCaptureCapacity(), 0));
  const size_t skip = inside.size() > cap ? inside.size() - cap : 0;
  out.first += skip;
  if (inside.size() > skip) {
    out.set = ctx->SetCallCaptures(slot.seq, std::span<const int32_t>(inside).subspan(skip));
  }
  return out;
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

Result<Token> Scheduler::Impl::SampleFor(Slot& slot, int32_t logits_index) {
  float* logits = const_cast<float*>(ctx->Logits(logits_index));  // ours until the next decode
  if (slot.run.job->request.sampling.ignore_eos) {
    for (Token t : eog_tokens) logits[t] = -INFINITY;
  }
  PREFIXD_ASSIGN_OR_RETURN(const Token t, slot.run.sampler->Sample(ctx->raw(), logits_index));
  if (slot.run.job->request.sampling.top_logprobs >= 0 && !model.IsEndOfGeneration(t)) {
    NoteLogprobs(slot, logits, t);
  }
  return t;
}

// Samples and takes the token. A grammar that has run its course while ignore_eos masks the
// end of generation has no token left to allow: its end is the answer's end (finish "stop").
// Any other sampling failure fails this request alone.
void Scheduler::Impl::SampleAndAccept(Slot& slot, int32_t logits_index) {
  Result<Token> t = SampleFor(slot, logits_index);
  if (t.ok()) return Accept(slot, *t);
  EndSampleFailure(slot, t.status());
}

void Scheduler::Impl::EndSampleFailure(Slot& slot, const Status& st) {
  if (slot.run.sampler->has_grammar() && slot.run.job->request.sampling.ignore_eos) {
    return Finish(slot, FinishReason::kStop);
  }
  Fail(slot, st);
}

void Scheduler::Impl::NoteLogprobs(Slot& slot, const float* logits, Token t) {
  TokenLogprobs lp =
      ComputeLogprobs(logits, model.n_vocab(), t, slot.run.job->request.sampling.top_logprobs);
  lp.chosen.piece = model.TokenPiece(t, RenderSpecial(slot, t));
  for (TokenProb& p : lp.top) p.piece = model.TokenPiece(p.token, RenderSpecial(slot, p.token));
  slot.run.result.logprobs.push_back(std::move(lp));
}

// Control tokens render as nothing, except those the reply's parser needs (preserved tokens,
// e.g. gpt-oss <|channel|>), which render as their text.
bool Scheduler::Impl::RenderSpecial(const Slot& slot, Token t) const {
  const auto& special = slot.run.job->request.prompt.output.special_tokens;
  return std::find(special.begin(), special.end(), t) != special.end();
}

// Takes the token sampled for `slot`: ends the request or queues the token for decoding.
void Scheduler::Impl::Accept(Slot& slot, Token t) {
  if (std::optional<FinishReason> reason = Take(slot, t)) Finish(slot, *reason);
}

// Accept without the ending: the reason the request ends with `t`, if it does; the caller
// finishes it (after taking back what it decoded beyond, when it speculated).
std::optional<FinishReason> Scheduler::Impl::Take(Slot& slot, Token t) {
  SlotRun& run = slot.run;
  const CompletionRequest& req = run.job->request;
  if (model.IsEndOfGeneration(t)) return FinishReason::kStop;
  run.result.tokens.push_back(t);
  std::string piece = run.stream->Push(model.TokenPiece(t, RenderSpecial(slot, t)));
  if (!run.job->completion->Put(piece)) return FinishReason::kCancelled;
  if (run.stream->stopped()) return FinishReason::kStop;
  if (int(run.result.tokens.size()) >= req.max_tokens) return FinishReason::kLength;
  if (run.pos + 1 >= int32_t(options.n_ctx_per_slot)) return FinishReason::kLength;
  if (drafter && run.next_token >= 0) run.history.push_back(run.next_token);
  run.next_token = t;
  return std::nullopt;
}

// One call for every generating slot: its next token, and the tokens drafted to follow it
// (verified in the same call; Verify).
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
      if (!s.run.draft.empty()) return verdicts.push_back(Verify(s, first[i]));
      s.run.pos++;
      SampleAndAccept(s, first[i]);
    });
  }
  for (Verdict& v : verdicts) Guarded(*v.slot, [&] { Settle(v); });
}

// Every generating slot's draft, drafted together (DraftRoom, Drafter::DraftAll, KeepDraft).
void Scheduler::Impl::DraftAll() {
  if (!drafter) return;
  std::vector<Drafter::Want> wants;
  std::vector<Slot*> drafting;
  for (Slot& s : slots) {
    if (s.phase != Phase::kGenerate) continue;
    Guarded(s, [&] {
      const int32_t n_max = DraftRoom(s);
      if (n_max <= 0) return;
      wants.push_back({s.seq, &s.run.history, s.run.next_token, s.run.pos, n_max, &s.run.draft});
      drafting.push_back(&s);
    });
  }
  if (wants.empty()) return;
  try {
    drafter->DraftAll(wants);
  } catch (const std::exception& e) {
    for (Slot* s : drafting) AbortSlot(*s, e.what());
    return;
  }
  for (Slot* s : drafting) Guarded(*s, [&] { KeepDraft(*s); });
  if (drafter->draft_context() != nullptr) {
    MutexLock lock(&mu);
    stats.draft_prefill_tokens = drafter->draft_prefill_tokens();
    stats.draft_restored_tokens = drafter->draft_restored_tokens();
  }
}

// The most tokens the slot's next draft may have: 0 without speculation, for a request that
// turned it off, after a replay (one step's pause), or where no more tokens fit.
int32_t Scheduler::Impl::DraftRoom(Slot& slot) {
  SlotRun& run = slot.run;
  run.draft.clear();
  run.checkpoint.clear();
  if (std::exchange(run.draft_pause, false)) return 0;
  const CompletionRequest& req = run.job->request;
  const int32_t wanted = req.spec_n_max >= 0 ? req.spec_n_max : drafter->n_max();
  const int32_t room = std::min(req.max_tokens - int32_t(run.result.tokens.size()) - 1,
                                int32_t(options.n_ctx_per_slot) - run.pos - 2);
  return std::min(wanted, room);
}

// The draft to verify with the slot's next token (dropped when shorter than the request's
// n_min), and the checkpoint its rollback needs.
void Scheduler::Impl::KeepDraft(Slot& slot) {
  SlotRun& run = slot.run;
  const CompletionRequest& req = run.job->request;
  if (int32_t(run.draft.size()) < std::max(req.spec_n_min, 1)) return run.draft.clear();
  if (rollback != Rollback::kCheckpoint) return;
  Result<std::vector<uint8_t>> checkpoint = ctx->GetState(slot.seq, StatePart::kPartial);
  if (!checkpoint.ok()) {  // no draft then: one token, as without speculation
    Logf(LogLevel::kWarning, "speculation checkpoint failed: %s",
         checkpoint.status().ToString().c_str());
    return run.draft.clear();
  }
  run.checkpoint = std::move(checkpoint).value();
}

// What the target says of the slot's draft, decoded after its next token from `base` on in
// the last call: the tokens sampled while they equal the draft, and the one after. Each goes
// through Take as it would without speculation; the sequence keeps the decoded tokens taken
// and the rest is taken back (RollBack) before the request may end, so it only ever publishes
// committed state.
Verdict Scheduler::Impl::Verify(Slot& slot, int32_t base) {
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
    Result<Token> t = SampleFor(slot, base + int32_t(j));
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
    v.reason = Take(slot, sampled[j]);
    if (!v.reason && j < accepted) run.pos++;  // a draft token: decoded already
  }
  drafter->Accept(slot.seq, int32_t(accepted));
  Usage& usage = run.result.usage;
  usage.draft_tokens += int32_t(draft.size());
  for (Token t : draft) {  // FNV-1a over each token's bytes
    for (int b = 0; b < 4; ++b) {
      usage.draft_digest = (usage.draft_digest ^ ((uint32_t(t) >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    }
  }
  usage.draft_accepted += int32_t(accepted);
  usage.draft_steps++;
  return v;
}

// Takes back what the slot's verdict left out of the sequence, then ends the request if it
// ended.
void Scheduler::Impl::Settle(Verdict& v) {
  Slot& slot = *v.slot;
  SlotRun& run = slot.run;
  if (rollback == Rollback::kCheckpoint && run.pos < v.pos0 + int32_t(v.decoded.size())) {
    run.result.usage.draft_replays++;
    // llama-server replays in a step of its own, without a draft; the next step does the same
    // here, so that both draft at the same positions (the same acceptance) and a drafter
    // that just failed is not asked again at once.
    run.draft_pause = true;
  }
  Status st = RollBack(*ctx, rollback, slot.seq, v.pos0, v.decoded, run.pos, run.checkpoint);
  run.checkpoint.clear();
  if (!st.ok()) return Fail(slot, st);
  if (v.reason) return Finish(slot, *v.reason);
  if (!v.failed.ok()) EndSampleFailure(slot, v.failed);
}

void Scheduler::Impl::Finish(Slot& slot, FinishReason reason) {
  CaptureLastCall(slot);  // a request that ends at its first token: its usage counts them
  std::string tail = slot.run.stream->Finish();
  Completion& completion = *slot.run.job->completion;
  if (reason != FinishReason::kCancelled) completion.Put(tail);
  CompletionResult& r = slot.run.result;
  r.finish_reason = reason;
  r.text = slot.run.stream->text();
  r.stop_word = slot.run.stream->stop_word();
  r.usage.completion_tokens = int32_t(r.tokens.size());
  if (slot.phase == Phase::kGenerate) r.usage.decode_ms = MillisSince(slot.run.decode_started);
  const CompletionResult counted = r;  // r goes to the client; the cache work reads this copy
  CountRequest(counted);  // before the answer: a /metrics read after it counts it
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
    KeepHeld(slot, counted.tokens);
  } else {
    ForgetHeld(slot);
  }
  slot.run.job.reset();
  slot.phase = Phase::kIdle;
  if (drafter) drafter->End(slot.seq);
  NoteSlot(slot);
  FreeSlot();  // after the cache work: FlushDisk waits for every slot to be free
}

// The sequence keeps what was decoded: the prompt up to slot.run.pos and the generated tokens that
// were fed back (the last sampled one never was).
void Scheduler::Impl::KeepHeld(Slot& slot, std::span<const Token> generated) {
  const auto& prompt = slot.run.job->request.prompt.tokens;
  const size_t n = prompt.size();
  const size_t pos = size_t(slot.run.pos);
  slot.held.tokens.assign(prompt.begin(), prompt.begin() + std::min(pos, n));
  const auto& points = slot.run.job->request.prompt.capture_points;
  slot.held.tail = std::min(points.empty() ? n - 1 : size_t(points.back()), pos);
  if (pos > n) slot.held.tokens.insert(slot.held.tokens.end(), generated.begin(), generated.begin() + (pos - n));
  slot.held.domain = slot.run.domain;
}

void Scheduler::Impl::ForgetHeld(Slot& slot) {
  ctx->SeqClear(slot.seq);
  slot.held.tokens.clear();
  NoteSlot(slot);
}

void Scheduler::Impl::NoteSlot(const Slot& slot) {
  SlotView v;
  v.busy = slot.phase != Phase::kIdle;
  std::span<const Token> tokens = slot.held.tokens;
  if (v.busy) tokens = slot.run.job->request.prompt.tokens;
  v.n_tokens = uint32_t(tokens.size());
  // An idle slot's tree is that of its last prompt up to its tail (what the cache published).
  if (!v.busy && slot.held.tail > 0) tokens = tokens.first(std::min(tokens.size(), slot.held.tail));
  const Digest& domain = v.busy ? slot.run.domain : slot.held.domain;
  if (cache_io()) {
    v.session = PrefixRootId(domain, tokens, options.block_size);
    v.domain = ShortId(domain);
  }
  MutexLock lock(&mu);
  slot_views[size_t(&slot - slots.data())] = std::move(v);
}

void Scheduler::Impl::Fail(Slot& slot, const Status& st) {
  DropLastCall(slot);
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

void Scheduler::Impl::CountRequest(const CompletionResult& r) {
  MutexLock lock(&mu);
  stats.requests++;
  stats.prompt_tokens += r.usage.prompt_tokens;
  stats.cached_tokens += r.usage.cached_tokens;
  stats.evaluated_tokens += r.usage.evaluated_tokens;
  stats.generated_tokens += r.usage.completion_tokens;
  stats.draft_tokens += uint64_t(r.usage.draft_tokens);
  stats.draft_accepted += uint64_t(r.usage.draft_accepted);
  stats.draft_steps += uint64_t(r.usage.draft_steps);
  stats.restored_bytes += r.usage.restored_bytes;
  if (r.cache.tier == CacheTier::kSlot) stats.hits_slot++;
  if (r.cache.tier == CacheTier::kRam) stats.hits_ram++;
  if (r.cache.tier == CacheTier::kDisk) stats.hits_disk++;
  if (r.cache.tier == CacheTier::kRemote) stats.hits_remote++;
  if (r.cache.tier == CacheTier::kNone) {
    stats.misses++;
    stats.misses_by_reason[r.cache.miss == CacheMiss::kNotMissed ? CacheMiss::kDisabled
                                                                 : r.cache.miss]++;
  }
}

}  // namespace prefixd::engine
