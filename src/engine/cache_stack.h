// CacheStack: the prompt cache as the scheduler uses it. Owns the RAM tier, the disk and
// shared tiers (sealed when a record key is given), the domain fingerprints and the CacheIo
// that moves state between a slot's sequence and the tiers; answers prefetch, listing,
// eviction, clear, flush and stats. The cache is off when the options say so or the codec
// probe finds the model's state unusable: then io() is null and every method is a no-op (no
// prefixes, nothing to evict, clearing succeeds).
//
// The scheduler keeps what belongs to its slots: which slot holds what, and when a slot must
// forget it after a clear or an eviction (it bumps its epoch between Find and Evict).
//
// Thread-safety: Create, io(), NoteForegroundBusy, RememberDomain and ReleaseIo run on the
// worker thread (they touch the context or its order of work); the rest may be called from any
// thread (the tiers synchronize).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cache/block_reporter.h"
#include "cache/prefix_cache.h"
#include "store/redis_store.h"
#include "engine/context.h"
#include "engine/domain.h"
#include "engine/options.h"
#include "engine/prefix_views.h"
#include "engine/stats.h"
#include "engine/job.h"
#include "engine/model/model.h"

namespace prefixd {
class PoolWarmer;
}
namespace prefixd::cache {
class TieredCache;
}
namespace prefixd::store {
class DiskStore;
class SealedStore;
}

namespace prefixd::engine {

class CacheIo;
struct StateShape;
class Drafter;
class DraftHistory;
class MtpSidecar;

// The boundary Snapshots' spacing, which is also a grid of prefill cuts: the batch rounded
// down to Blocks (at least one Block).
uint32_t SnapshotSpacing(const EngineOptions& options);

// The boundary grid where Snapshots are captured inside calls: a Snapshot then costs no call,
// only its bytes (copied out of the context, kept in the tiers), so one every k Blocks, k the
// fewest Blocks whose rows weigh as much as one Snapshot (the recurrent state, and the window
// of a sliding-window cache of `n_swa` cells): the Snapshots never weigh more than the rows they
// let a restore skip. Between one Block and `most` (the grid of the cuts).
uint32_t InCallSnapshotSpacing(const StateShape& shape, int n_swa, uint32_t block, uint32_t most);

// What MemoryWarming::kAuto becomes (any other choice stays): kThread where the model leaves a
// host core free while it computes (`computes_off_host`, or the most threads it runs, prefill's
// or decode's, fewer than `cores`), else kIdle.
MemoryWarming ResolveMemoryWarming(MemoryWarming asked, bool computes_off_host,
                                   int model_threads, unsigned cores);

class CacheStack {
 public:
  // Probes the state codec on `ctx` (sequence 0, which it leaves empty) and builds the tiers
  // for the mode it finds. Fails only when a tier cannot be opened (the disk directory, say).
  static Result<std::unique_ptr<CacheStack>> Create(const Model& model, Context& ctx,
                                                    const ContextOptions& copt,
                                                    const EngineOptions& options);
  ~CacheStack();

  CacheIo* io() const { return io_.get(); }  // null: the cache is off
  StateMode state_mode() const { return state_mode_; }
  bool chunking_invariant() const { return chunking_invariant_; }
  // Whether Snapshots of this model are captured inside prefill calls (CacheIoOptions::
  // capture_in_call), with the cache on or off alike: options.capture_in_call, a context that
  // can (Context::CapturesInCall) and partial Snapshots (not --whole-state, nor a codec that
  // takes whole states). The prefill schedule follows it.
  bool capture_in_call() const { return capture_in_call_; }
  uint32_t snapshot_spacing() const { return snapshot_spacing_; }  // the boundary grid
  // The domain of a tenant's prompts (with the cache off: of default fingerprints).
  Digest DomainOf(const std::string& tenant_salt) const;
  // The disk and shared tiers' stores as the cache uses them (sealed when records are), in
  // that order, those that exist: where the image encoder keeps embeddings too. Set at build,
  // unchanged after; they live as long as the stack.
  std::vector<store::RecordStore*> LowerStores() const;

  // On the submitting thread: what the disk and the shared tier hold of the job's prompt goes
  // into RAM (or is opened on disk) before the job queues; job.prefetch says what was found.
  void Prefetch(Job& job) const;
  // Lets `prefixd cache --model F` find this domain's records later (once per domain).
  Status RememberDomain(const Digest& domain);
  // Write-behind waits while the model runs: a disk writer taking a core on a small machine
  // makes every decode step wait for the preempted inference thread.
  void NoteForegroundBusy(bool busy);
  // Between requests, on the engine's thread: makes memory present for the next requests'
  // payloads, one buffer of a size they took fresh (BufferPool::WarmOne; `stop` asked every few
  // MiB). True while more is left to warm. False at once unless the warming is kIdle (with
  // kThread the cache's own thread warms, idle or not).
  bool WarmOne(const std::function<bool()>& stop);
  // How payload memory is warmed (ResolveMemoryWarming of the options'; kOff with the cache off).
  MemoryWarming memory_warming() const { return warming_; }
  // With draft-mtp: the MTP head's history is cached beside the target's (MtpSidecar), and
  // Prefetch reads it too. Logs and leaves it out where the sidecar cannot be (the cache off,
  // or a target whose entries carry no Snapshot). Runs on the thread that uses the context.
  Status AttachMtpSidecar(Drafter& drafter);
  // With a draft model: its history is cached beside the target's (DraftHistory). Logs and
  // leaves it out where it cannot be (the cache off, a draft memory that keeps a window).
  // Runs on the thread that uses the contexts.
  Status AttachDraftHistory(Drafter& drafter);
  // Frees CacheIo (and the sidecar), on the thread that used the context.
  void ReleaseIo();

  // The tiers' sizes, counts and evictions, and the shared tier's state, into `s`.
  void AddStats(EngineStats* s) const;
  // The cached prefixes of RAM and disk, merged; of one tenant's domain when `tenant_salt`.
  // A tenant's list holds its prompts' trees and their companions' (PrefixRole).
  std::vector<CachedPrefix> List(const std::string* tenant_salt) const;
  // The cached prefix `domain`/`root` (ShortIds) names, if a tier holds it.
  std::optional<cache::PrefixSummary> Find(const std::string& domain,
                                           const std::string& root) const;
  // Drops a found prefix from RAM and disk, after the writes still queued for it have landed
  // (they pin its RAM entries and would put its records back). The slots forget what they
  // hold (the scheduler's epoch): their Blocks leave the KV-event stream now.
  PrefixEviction Evict(const cache::PrefixSummary& found);
  // Drops every entry of RAM and disk; the slots' Blocks leave the KV-event stream first.
  Status Clear();
  // Sequence `seq` now holds `tokens` (positions [0, size)) of `domain`: what the KV-event
  // stream reports as the slots' Blocks (cache::SlotBlocks). No-op without a stream.
  void NoteSlotHolds(int32_t seq, const Digest& domain, std::span<const cache::Token> tokens);
  // Waits until what was queued for the disk and the shared tier has been written.
  void Flush();

 private:
  CacheStack() = default;
  Status Build(const Model& model, Context& ctx, const ContextOptions& copt);
  Status OpenLowerTiers();
  // Resolves the memory warming and starts its thread when it is kThread.
  void StartWarming(const Model& model, const ContextOptions& copt);
  Companions CompanionsOf(std::span<const cache::PrefixSummary> ram,
                          std::span<const cache::PrefixSummary> disk) const;

  EngineOptions options_;
  std::string model_path_;
  StateMode state_mode_ = StateMode::kSliced;
  bool chunking_invariant_ = true;  // what the codec probe found (see CodecProbe)
  bool capture_in_call_ = false;
  uint32_t snapshot_spacing_ = 0;
  bool open_disk_ = false;  // a prefix on disk is opened, not read into RAM (TieredCache::Promote)
  bool store_busy_ = false;  // what the disk store was last told (SetForegroundBusy)
  MemoryWarming warming_ = MemoryWarming::kOff;
  std::unique_ptr<PoolWarmer> warmer_;  // with kThread
  DomainFingerprints fingerprints_;
  std::set<Digest> remembered_domains_;  // written to <cache_dir>/domains once each
  // Before ram_ and disk_ (they report to it); stopped first in ~CacheStack.
  std::unique_ptr<cache::BlockReporter> block_reporter_;
  std::unique_ptr<cache::PrefixCache> ram_;          // null: the cache is off
  std::unique_ptr<store::DiskStore> disk_;           // null without a cache dir
  std::unique_ptr<store::RedisStore> remote_;        // null without --remote-cache
  // The lower tiers as the cache sees them: sealing over disk_ and remote_ with a record key.
  std::unique_ptr<store::SealedStore> sealed_disk_, sealed_remote_;
  std::unique_ptr<cache::TieredCache> tiers_;
  std::unique_ptr<CacheIo> io_;
  std::unique_ptr<MtpSidecar> sidecar_;  // null: no MTP head, or its history is not cached
  std::unique_ptr<DraftHistory> draft_history_;  // null: no draft model, or not cached
  Drafter* draft_history_user_ = nullptr;         // the Drafter it is attached to
  // Set once before the first request (read by Prefetch on other threads; never cleared).
  bool prefetch_mtp_ = false;
  std::optional<Digest> prefetch_draft_;  // the draft model's id (DraftHistory::DomainOf)
};

}  // namespace prefixd::engine
