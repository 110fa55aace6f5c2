#include "engine/cache_stack.h"

#include <algorithm>
#include <thread>

#include "cache/domain_registry.h"
#include "cache/fingerprint.h"
#include "cache/prefix_inventory.h"
#include "cache/tiered_cache.h"
#include "engine/cache_io.h"
#include "engine/chunking_memo.h"
#include "engine/codec_probe.h"
#include "engine/draft_history.h"
#include "engine/mtp_sidecar.h"
#include "engine/prefill.h"
#include "engine/prefix_views.h"
#include "engine/speculation.h"
#include "store/disk_store.h"
#include "store/redis_store.h"
#include "store/sealed_store.h"
#include "util/buffer_pool.h"
#include "util/env.h"
#include "util/log.h"
#include "util/pool_warmer.h"

namespace prefixd::engine {

namespace {

// The most the process keeps of freed payload buffers for reuse (util/buffer_pool.h).
constexpr uint64_t kBufferPoolMax = uint64_t(1) << 30;

RemoteTierStats RemoteStatsOf(const store::RedisStoreStats& r) {
  RemoteTierStats s;
  s.up = r.up;
  s.downs = r.downs;
  s.queue_depth = r.queue_depth;
  s.puts_accepted = r.puts_accepted;
  s.puts_written = r.puts_written;
  s.put_drop_queue_full = r.put_drop_queue_full;
  s.put_drop_down = r.put_drop_down;
  s.put_fail_rejected = r.put_fail_rejected;
  s.put_fail_io = r.put_fail_io;
  s.bytes_written = r.bytes_written;
  s.gets = r.gets;
  s.get_hits = r.get_hits;
  s.get_not_found = r.get_not_found;
  s.get_corrupt = r.get_corrupt;
  s.get_errors = r.get_errors;
  s.skipped_down = r.skipped_down;
  s.bytes_read = r.bytes_read;
  return s;
}

// Where the chunking probe's answer for these settings is remembered, and the answer when an
// earlier start found it (no cache dir: no memo, the probe runs).
struct ChunkingMemoSlot {
  std::string path;
  std::optional<Digest> key;
  std::optional<bool> known;
};

ChunkingMemoSlot FindChunkingMemo(const Model& model, const ContextOptions& copt,
                                  const EngineOptions& options) {
  ChunkingMemoSlot slot;
  if (options.cache_dir.empty()) return slot;
  (void)Env::Default()->CreateDirs(options.cache_dir);  // a memo not saved costs a re-probe
  cache::FingerprintMemo fingerprints(options.cache_dir + "/fingerprints.tsv");
  Result<Digest> model_digest = cache::FileFingerprint(model.path(), fingerprints);
  if (!model_digest.ok()) return slot;
  slot.path = options.cache_dir + "/chunking.tsv";
  slot.key = ChunkingKey(*model_digest, copt, options.n_gpu_layers, model.devices());
  slot.known = LoadChunkingInvariant(slot.path, *slot.key);
  return slot;
}

void LogProbeFindings(const CodecProbe& probe, bool whole_state_asked) {
  if (!probe.chunking_invariant) {
    Log(LogLevel::kInfo, "note: with these settings the model's logits depend on how a "
                         "prompt is cut into prefill calls (a call of one row takes other "
                         "kernels than a call of several); every prompt is prefilled by the same calls "
                         "with the cache on or off, so restores do not change the output, except "
                         "a session's answer reused as it was decoded (docs/architecture.md, "
                         "\"The chunk schedule\")");
  }
  if (probe.mode != StateMode::kWhole) return;
  if (whole_state_asked) {
    Log(LogLevel::kInfo, "--whole-state: the cache keeps whole-state snapshots");
  } else {
    Logf(LogLevel::kInfo, "the state codec cannot slice this model's state (%s); the cache "
                          "keeps whole-state snapshots at capture points (correct, larger)",
         probe.why_whole.c_str());
  }
}

}  // namespace

uint32_t SnapshotSpacing(const EngineOptions& o) {
  return std::max(o.n_batch / o.block_size, 1u) * o.block_size;
}

uint32_t InCallSnapshotSpacing(const StateShape& shape, int n_swa, uint32_t block, uint32_t most) {
  uint64_t row = 0, window_row = 0;
  for (const LayerShape& l : shape.layers) row += l.k_row_size + l.v_row_size;
  for (const LayerShape& l : shape.swa_layers) window_row += l.k_row_size + l.v_row_size;
  const uint64_t snapshot = shape.recurrent_bytes + window_row * uint64_t(std::max(n_swa, 0));
  const uint64_t block_rows = std::max<uint64_t>(row * block, 1);
  const uint64_t blocks = std::max<uint64_t>(1, (snapshot + block_rows - 1) / block_rows);
  return uint32_t(std::min<uint64_t>(blocks * block, std::max(most, block)));
}

CacheStack::~CacheStack() {
  if (block_reporter_) block_reporter_->Stop();  // the tiers it reads go below
}

Result<std::unique_ptr<CacheStack>> CacheStack::Create(const Model& model, Context& ctx,
                                                       const ContextOptions& copt,
                                                       const EngineOptions& options) {
  std::unique_ptr<CacheStack> stack(new CacheStack());
  stack->options_ = options;
  stack->model_path_ = model.path();
  stack->capture_in_call_ = options.capture_in_call && !options.whole_state && ctx.CapturesInCall();
  if (!options.cache_enabled) return stack;
  PREFIXD_RETURN_IF_ERROR(stack->Build(model, ctx, copt));
  return stack;
}

// Probes the state codec on this model (kWhole when it cannot slice the state), then builds
// the tiers and CacheIo for that mode.
Status CacheStack::Build(const Model& model, Context& ctx, const ContextOptions& copt) {
  const ChunkingMemoSlot memo = FindChunkingMemo(model, copt, options_);
  ProbeOptions po;
  po.force_whole = options_.whole_state;
  po.known_chunking_invariant = memo.known;
  Result<CodecProbe> probe = ProbeStateCodec(ctx, 0, po);
  if (!probe.ok()) {
    Logf(LogLevel::kWarning, "the prompt cache is off for this model: %s",
         probe.status().ToString().c_str());
    return Status::OK();
  }
  state_mode_ = probe->mode;
  chunking_invariant_ = probe->chunking_invariant;
  if (probe->chunking_measured && memo.key) {
    Status saved = SaveChunkingInvariant(memo.path, *memo.key, chunking_invariant_);
    if (!saved.ok()) Logf(LogLevel::kWarning, "chunking probe memo: %s", saved.ToString().c_str());
  }
  LogProbeFindings(*probe, options_.whole_state);
  const bool whole = state_mode_ == StateMode::kWhole;
  PREFIXD_ASSIGN_OR_RETURN(fingerprints_, ComputeFingerprints(model, copt, options_, state_mode_));
  CacheIoOptions io;
  io.block_size = options_.block_size;
  io.snapshot_spacing = SnapshotSpacing(options_);
  io.has_rows = !whole && LayoutHasRows(model.layout());
  io.needs_snapshot = whole || LayoutNeedsSnapshot(model.layout());
  io.tiled_from = kTiledFrom;
  io.mode = state_mode_;
  capture_in_call_ = capture_in_call_ && !whole;
  io.capture_in_call = capture_in_call_;
  if (capture_in_call_ && probe->shape) {
    io.snapshot_spacing = InCallSnapshotSpacing(*probe->shape, model.n_swa(), options_.block_size,
                                                io.snapshot_spacing);
  }
  snapshot_spacing_ = io.snapshot_spacing;
  if (io.needs_snapshot) {
    Logf(LogLevel::kInfo, "boundary Snapshots every %u tokens, %s", snapshot_spacing_,
         capture_in_call_ ? "captured inside prefill calls" : "each ending a prefill call");
  }
  // A sealed record is opened whole, never read in place (SealedStore::OpenRecord).
  open_disk_ = io.has_rows && !options_.disk_hits_through_ram && !options_.record_key;
  cache::PrefixCache::Options co;
  co.block_size = options_.block_size;
  co.ram_budget_bytes = options_.ram_budget_bytes;
  co.has_rows = io.has_rows;
  co.needs_snapshot = io.needs_snapshot;
  if (options_.block_listener != nullptr) {
    std::optional<Digest> only;
    if (!options_.block_events_all_tenants) only = DomainOf("");
    block_reporter_ = std::make_unique<cache::BlockReporter>(*options_.block_listener, only,
                                                             options_.block_size);
    co.listener = block_reporter_->ram_listener();
  }
  ram_ = std::make_unique<cache::PrefixCache>(co);
  // What the RAM tier evicts is kept for the next payloads, up to a quarter of its budget.
  BufferPool::Shared().RaiseLimit(std::min<uint64_t>(options_.ram_budget_bytes / 4, kBufferPoolMax));
  StartWarming(model, copt);
  PREFIXD_RETURN_IF_ERROR(OpenLowerTiers());
  if (block_reporter_) block_reporter_->Start(*ram_, disk_.get());
  cache::TieredCache::Lower lower{disk_.get(), remote_.get()};
  if (options_.record_key) {
    if (disk_) sealed_disk_ = std::make_unique<store::SealedStore>(*disk_, *options_.record_key);
    if (remote_) {
      sealed_remote_ = std::make_unique<store::SealedStore>(*remote_, *options_.record_key);
    }
    lower = {sealed_disk_.get(), sealed_remote_.get()};
  }
  tiers_ = std::make_unique<cache::TieredCache>(*ram_, lower);
  io_ = std::make_unique<CacheIo>(ctx, *tiers_, io, std::move(probe->shape));
  return Status::OK();
}

std::vector<store::RecordStore*> CacheStack::LowerStores() const {
  std::vector<store::RecordStore*> out;
  store::RecordStore* disk = sealed_disk_ ? sealed_disk_.get() : static_cast<store::RecordStore*>(disk_.get());
  store::RecordStore* remote =
      sealed_remote_ ? sealed_remote_.get() : static_cast<store::RecordStore*>(remote_.get());
  for (store::RecordStore* s : {disk, remote}) {
    if (s != nullptr) out.push_back(s);
  }
  return out;
}

MemoryWarming ResolveMemoryWarming(MemoryWarming asked, bool computes_off_host,
                                   int model_threads, unsigned cores) {
  if (asked != MemoryWarming::kAuto) return asked;
  const bool core_free = computes_off_host || (cores > 0 && unsigned(model_threads) < cores);
  return core_free ? MemoryWarming::kThread : MemoryWarming::kIdle;
}

void CacheStack::StartWarming(const Model& model, const ContextOptions& copt) {
  const unsigned cores = std::thread::hardware_concurrency();
  const int threads = copt.n_threads > 0 ? copt.n_threads : int(cores);
  const int batch_threads = copt.n_threads_batch > 0 ? copt.n_threads_batch : threads;
  warming_ = ResolveMemoryWarming(options_.memory_warming, model.computes_off_host(),
                                  std::max(threads, batch_threads), cores);
  if (warming_ == MemoryWarming::kThread) {
    warmer_ = std::make_unique<PoolWarmer>(BufferPool::Shared());
  }
  Logf(LogLevel::kInfo, "payload memory warmed: %s%s", MemoryWarmingName(warming_),
       options_.memory_warming == MemoryWarming::kAuto ? " (auto)" : "");
}

// The disk tier (with a cache dir) and the shared tier (with a remote cache URL; Redis being
// down is no error: the tier connects when it answers).
Status CacheStack::OpenLowerTiers() {
  const uint64_t queue_bytes = std::min<uint64_t>(options_.ram_budget_bytes / 2, uint64_t(1) << 30);
  if (!options_.cache_dir.empty()) {
    store::DiskStore::Options so;
    so.dir = options_.cache_dir;
    so.quota_bytes = options_.disk_quota_bytes;
    so.writer_queue_depth = 1024;
    so.writer_queue_bytes = queue_bytes;
    PREFIXD_ASSIGN_OR_RETURN(disk_, store::DiskStore::Open(so));
    Logf(LogLevel::kInfo, "disk tier %s: %s", so.dir.c_str(),
         disk_->GetStats().recovery.ToString().c_str());
  }
  if (!options_.remote_cache_url.empty()) {
    store::RedisStoreOptions ro;
    ro.url = options_.remote_cache_url;
    ro.password = options_.remote_cache_password;
    ro.writer_queue_depth = 1024;
    ro.writer_queue_bytes = queue_bytes;
    PREFIXD_ASSIGN_OR_RETURN(remote_, store::RedisStore::Open(ro));
  }
  return Status::OK();
}

Digest CacheStack::DomainOf(const std::string& tenant_salt) const {
  return DomainFor(fingerprints_, tenant_salt);
}

void CacheStack::Prefetch(Job& job) const {
  if (!tiers_ || !tiers_->has_lower() || job.request.prompt.tokens.size() < 2) return;
  const auto& tokens = job.request.prompt.tokens;
  const auto t0 = Clock::now();
  const Digest domain = DomainOf(job.request.tenant_salt);
  job.prefetch = engine::Prefetch(*tiers_, domain, tokens, tokens.size() - 1, open_disk_);
  if (prefetch_mtp_) tiers_->Promote(MtpSidecar::DomainOf(domain), tokens, tokens.size() - 1);
  if (prefetch_draft_) {
    tiers_->Promote(DraftHistory::DomainOf(*prefetch_draft_, domain), tokens, tokens.size() - 1);
  }
  job.prefetch_ms = MillisSince(t0);
}

Status CacheStack::RememberDomain(const Digest& domain) {
  if (options_.cache_dir.empty() || !remembered_domains_.insert(domain).second) {
    return Status::OK();
  }
  return cache::RememberDomain(options_.cache_dir,
                               {domain, fingerprints_.model, fingerprints_.layout, model_path_});
}

void CacheStack::NoteForegroundBusy(bool busy) {
  if (!disk_ || busy == store_busy_) return;
  store_busy_ = busy;
  disk_->SetForegroundBusy(busy);
}

bool CacheStack::WarmOne(const std::function<bool()>& stop) {
  return warming_ == MemoryWarming::kIdle && BufferPool::Shared().WarmOne(stop);
}

void CacheStack::ReleaseIo() {
  if (io_) io_->AttachMtpSidecar(nullptr);
  sidecar_.reset();
  if (draft_history_user_ != nullptr) draft_history_user_->AttachDraftHistory(nullptr);
  draft_history_user_ = nullptr;
  draft_history_.reset();
  io_.reset();
}

Status CacheStack::AttachDraftHistory(Drafter& drafter) {
  Context* draft = drafter.draft_context();
  if (!io_ || draft == nullptr) return Status::OK();
  PREFIXD_ASSIGN_OR_RETURN(
      DomainFingerprints fp,
      ComputeFingerprints(draft->model(), draft->options(), options_, StateMode::kSliced));
  Sha256 id;
  id.Update(fp.model.data(), fp.model.size());
  id.Update(fp.layout.data(), fp.layout.size());
  const Digest draft_id = id.Finish();
  Result<std::unique_ptr<DraftHistory>> h =
      DraftHistory::Create(*draft, draft_id, *tiers_, options_.block_size, /*probe_seq=*/0);
  if (h.status().code() == Status::Code::kNotSupported) {
    Logf(LogLevel::kInfo, "draft model history not cached: %s", h.status().message().c_str());
    return Status::OK();
  }
  if (!h.ok()) return h.status();
  draft_history_ = std::move(h).value();
  draft_history_user_ = &drafter;
  drafter.AttachDraftHistory(draft_history_.get());
  prefetch_draft_ = draft_id;
  Logf(LogLevel::kInfo, "draft model history cached beside the prompt's");
  return Status::OK();
}

Status CacheStack::AttachMtpSidecar(Drafter& drafter) {
  if (!io_) return Status::OK();
  Result<std::unique_ptr<MtpSidecar>> s =
      MtpSidecar::Create(drafter, *tiers_, options_.block_size, /*probe_seq=*/0);
  if (s.status().code() == Status::Code::kNotSupported) {
    Logf(LogLevel::kInfo, "MTP head history not cached: %s", s.status().message().c_str());
    return Status::OK();
  }
  if (!s.ok()) return s.status();
  sidecar_ = std::move(s).value();
  io_->AttachMtpSidecar(sidecar_.get());
  prefetch_mtp_ = true;
  Logf(LogLevel::kInfo, "MTP head history cached beside the prompt's");
  return Status::OK();
}

void CacheStack::AddStats(EngineStats* s) const {
  s->state_mode = state_mode_;
  s->chunking_invariant = chunking_invariant_;
  s->capture_in_call = capture_in_call_;
  s->memory_warming = warming_;
  s->snapshot_spacing = snapshot_spacing_;
  s->cache_on = io_ != nullptr;
  if (ram_) {
    cache::Stats cs = ram_->GetStats();
    s->bytes_by_tier[CacheTier::kRam] = cs.ram.total();
    s->evictions_by_tier[CacheTier::kRam] = cs.evictions;
    s->ram_budget_bytes = cs.ram_budget_bytes;
    s->ram_blocks = cs.blocks;
    s->ram_snapshots = cs.snapshots;
    s->ram_tails = cs.tails;
    s->buffer_pool = BufferPool::Shared().GetStats();
  }
  if (disk_) {
    store::Stats ds = disk_->GetStats();
    s->bytes_by_tier[CacheTier::kDisk] = ds.bytes;
    s->evictions_by_tier[CacheTier::kDisk] = ds.evictions;
    s->disk_quota_bytes = ds.quota_bytes;
    s->disk_records = ds.records;
    s->disk_index_bytes = ds.index_bytes;
    s->disk_records_by_kind = ds.records_by_kind;
  }
  if (remote_) s->remote = RemoteStatsOf(remote_->GetStats());
}

std::vector<CachedPrefix> CacheStack::List(const std::string* tenant_salt) const {
  if (!ram_) return {};
  std::vector<cache::PrefixSummary> ram = ram_->ListPrefixes();
  std::vector<cache::PrefixSummary> disk;
  if (disk_) disk = cache::ListStorePrefixes(*disk_, options_.block_size);
  const Companions companions = CompanionsOf(ram, disk);
  if (tenant_salt == nullptr) return MergePrefixes(ram, disk, nullptr, companions);
  const Digest domain = DomainOf(*tenant_salt);
  return MergePrefixes(ram, disk, &domain, companions);
}

// The MTP head's and the draft model's domains of every domain the tiers hold.
Companions CacheStack::CompanionsOf(std::span<const cache::PrefixSummary> ram,
                                    std::span<const cache::PrefixSummary> disk) const {
  Companions out;
  for (const auto* tier : {&ram, &disk}) {
    for (const cache::PrefixSummary& s : *tier) {
      if (prefetch_mtp_) out[MtpSidecar::DomainOf(s.domain)] = {PrefixRole::kMtpHead, s.domain};
      if (prefetch_draft_) {
        out[DraftHistory::DomainOf(*prefetch_draft_, s.domain)] = {PrefixRole::kDraftModel,
                                                                   s.domain};
      }
    }
  }
  return out;
}

std::optional<cache::PrefixSummary> CacheStack::Find(const std::string& domain,
                                                     const std::string& root) const {
  std::optional<cache::PrefixSummary> found;
  if (ram_) found = FindPrefix(ram_->ListPrefixes(), domain, root);
  if (!found && disk_) {
    found = FindPrefix(cache::ListStorePrefixes(*disk_, options_.block_size), domain, root);
  }
  return found;
}

PrefixEviction CacheStack::Evict(const cache::PrefixSummary& found) {
  if (block_reporter_) block_reporter_->slots().DropAll();
  if (disk_) disk_->Flush();
  PrefixEviction out;
  if (ram_) out.ram_entries = ram_->EvictPrefix(found.domain, found.root);
  if (disk_) out.disk_records = cache::RemoveStorePrefix(*disk_, found.domain, found.root);
  return out;
}

Status CacheStack::Clear() {
  if (block_reporter_) block_reporter_->slots().DropAll();
  if (ram_) ram_->Clear();
  if (disk_) return disk_->Clear(std::nullopt);
  return Status::OK();
}

void CacheStack::NoteSlotHolds(int32_t seq, const Digest& domain,
                               std::span<const cache::Token> tokens) {
  if (block_reporter_) block_reporter_->slots().Hold(size_t(seq), domain, tokens);
}

void CacheStack::Flush() {
  if (disk_) disk_->Flush();
  if (remote_) remote_->Flush();
}

}  // namespace prefixd::engine
