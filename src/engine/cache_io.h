// CacheIo: the engine's side of the prompt cache — restore a Slot's prefix from the cache and
// capture what its prefill produced. Fails closed: a restore that any check refuses leaves the
// sequence empty and the request prefills cold; nothing is published before its bytes are
// complete. Used only by the scheduler thread; owns nothing but its counters.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "cache/prefix_cache.h"
#include "cache/tiered_cache.h"
#include "engine/context.h"
#include "engine/job.h"
#include "engine/prefill.h"
#include "engine/codec/state_codec.h"

namespace prefixd::engine {

struct CacheIoOptions {
  uint32_t block_size = 256;
  // Models with non-sliceable state: a Snapshot every this many tokens (a multiple of
  // block_size) besides the message points, so a prompt that diverges inside a long message
  // goes back at most this far. The prefill batch rounded down to Blocks: chunks stay as large
  // as the backend wants (a cut at every Block halves a GPU's prefill throughput).
  uint32_t snapshot_spacing = 2048;
  bool has_rows = true;
  bool needs_snapshot = false;
  // The fewest rows a prefill call computes like any longer call (kTiledFrom): where restores
  // may start so that the prompt's chunk schedule goes on as in a cold run.
  int32_t tiled_from = kTiledFrom;
  // kWhole: a Snapshot is the whole state at its position (has_rows false, needs_snapshot
  // true); restores set it as it is. kSliced needs the shape the codec probe learned.
  StateMode mode = StateMode::kSliced;
  // Snapshots at capture points inside a prefill call are read from the call's captures
  // (Context::CallCapture) instead of ending the call there (Context::CapturesInCall); the
  // schedule is not cut for them, and a warm prefill resumes by ResumeChunks, from at most the
  // schedule's ResumeLimit.
  bool capture_in_call = false;
};

// What CacheIo::Restore put into a slot's sequence, and the prefill plan that follows from it.
struct Restoration {
  int32_t restored = 0;         // P: the sequence holds the prompt's state at P (0: cold)
  uint64_t restored_bytes = 0;  // state bytes set into it (0: the slot kept what it held)
  CacheOutcome outcome;
  int32_t mtp_restored = 0;     // P when the MTP head's history came back with it (MtpSidecar)
  // The capture points after P (ascending, inside (P, prompt size]) and the chunk schedule cut
  // at those that need a Snapshot (points it cannot cut at are dropped).
  std::vector<CapturePoint> captures;
  std::vector<int32_t> chunk_ends;
};

class MtpSidecar;

class CacheIo {
 public:
  // REQUIRES: ctx and cache outlive this object; `shape` (what the codec probe learned, see
  // codec_probe.h) is set when options.mode is kSliced.
  CacheIo(Context& ctx, cache::TieredCache& cache, const CacheIoOptions& options,
          std::optional<StateShape> shape);
  ~CacheIo();
  // Gives slot.seq the longest prefix of slot.run.job's prompt it can, cheapest way first:
  // (1) keep what the sequence holds (slot.held: all of it when it is a prefix of the prompt,
  // or for pure attention any prefix, the rows after it cut): 0 bytes, tier kSlot; (2) when
  // the sequence holds the rows of a cached prefix [0, P) but no state valid at P, set only the
  // Snapshot's partial and cut the rows after P; (3) otherwise assemble the whole prefix from
  // the local tiers (TieredCache: RAM, then disk; the shared tier was read into RAM by
  // Prefetch before the request queued). A restore of rows (pure attention) ends where the
  // prompt's chunk schedule (slot.run.chunk_ends, planned before) continues exactly as a cold
  // run does (ExactRestoreFloor); a Snapshot is restored where it is. Writes only the
  // sequence; what it did comes back for the caller to apply (Restoration). Any failed check
  // leaves slot.seq empty (cold).
  Restoration Restore(const Slot& slot);
  // Runs after the prefill call that ended at or after `point.pos`: records the point and
  // takes the Snapshot there, from the sequence when the call ended at the point, else from the
  // call's capture `in_call` (Context::CallCapture; Internal without one).
  Status Capture(Slot& slot, const CapturePoint& point, int32_t in_call = -1);
  bool capture_in_call() const;
  // Runs once the prompt is fully decoded: slices the new Blocks from one ranged state read and
  // publishes them, then the Snapshots and Tails taken during prefill.
  Status Publish(Slot& slot);
  // Runs when generation ends: publishes the Blocks the generated tokens completed and a
  // Snapshot at the end of what was decoded, so a next turn whose history keeps the answer
  // verbatim restores past it.
  // REQUIRES: `generated` holds the tokens sampled so far (slot.run.pos - prompt size of them
  // were decoded).
  Status PublishGeneration(Slot& slot, std::span<const Token> generated);
  // From now on every Snapshot takes the MTP head's carry, every publish publishes the head's
  // rows beside the target's, and every restore that sets bytes restores the head's history
  // too (a slot that keeps its sequence keeps the head's). REQUIRES: sidecar outlives this.
  void AttachMtpSidecar(MtpSidecar* sidecar);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads into RAM what the disk and the shared tier can add to the longest prefix of
// tokens[0, max_len) that RAM holds (TieredCache::Promote). Any thread: the scheduler calls it
// on the submitting thread, so a prefix on disk or in the shared tier is read before the
// request queues and the worker, which decodes every slot, restores it from RAM instead of
// waiting on the disk or the network. Returns what each tier offered.
// `open_disk` (models with rows): a longer prefix on disk is opened instead, its files asked
// into the page cache, and the restore reads it from there into the sequence in one copy.
PrefetchResult Prefetch(cache::TieredCache& cache, const Digest& domain,
                        std::span<const Token> tokens, size_t max_len, bool open_disk = false);

// Plans where the cache takes Snapshots (or Tails) during a prefill: the prompt's capture
// points, the branch point, and (for models with non-sliceable state) the prompt's end and
// every snapshot_spacing tokens, all inside (restored, n].
std::vector<CapturePoint> PlanCaptures(const Prompt& prompt, int32_t restored, int32_t branch,
                                       const CacheIoOptions& options);

}  // namespace prefixd::engine
