// What an engine reports of itself: counters (EngineStats), its slots (SlotView) and the prefix
// trees its tiers hold (CachedPrefix). Plain values; the engine's tiers' own types stay below it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/options.h"
#include "engine/request.h"
#include "store/record.h"
#include "util/buffer_pool.h"

namespace prefixd::engine {

// The kinds of record the disk tier holds (the store's vocabulary: one enum for the concept).
using RecordKind = store::RecordKind;
using store::RecordKindName;

// The shared tier's counters (Redis), for /metrics.
struct RemoteTierStats {
  bool up = false;             // the last command or connect succeeded
  uint64_t downs = 0;          // changes to down (Redis unreachable at start counts once)
  size_t queue_depth = 0;
  uint64_t puts_accepted = 0;
  uint64_t puts_written = 0;
  uint64_t put_drop_queue_full = 0;
  uint64_t put_drop_down = 0;       // Redis was down when the writer got to it
  uint64_t put_fail_rejected = 0;   // Redis answered an error (OOM with maxmemory, ...)
  uint64_t put_fail_io = 0;         // the connection failed while writing
  uint64_t bytes_written = 0;
  uint64_t gets = 0;
  uint64_t get_hits = 0;
  uint64_t get_not_found = 0;   // never stored, or evicted by Redis
  uint64_t get_corrupt = 0;     // a value that failed verification (deleted)
  uint64_t get_errors = 0;      // the connection failed, or Redis answered an error
  uint64_t skipped_down = 0;    // reads and lookups not sent: Redis was down
  uint64_t bytes_read = 0;
};

// What one Slot does, for the dashboard.
struct SlotView {
  bool busy = false;
  uint32_t n_tokens = 0;  // busy: the running prompt's tokens; idle: what the sequence holds
  std::string session;    // the prefix tree (CachedPrefix::root) of those tokens; "" for none
  std::string domain;     // its domain (CachedPrefix::domain: whose it is); "" for none
};

// One prefix tree of the cache (cache/prefix_inventory.h) in the RAM and disk tiers.
struct PrefixTierView {
  bool held = false;       // the tier holds some of the tree
  uint64_t blocks = 0, snapshots = 0, tails = 0;
  uint64_t bytes = 0;
};
// Whose history a prefix tree holds: the prompt's, or a companion's that follows a prompt's
// tree in a domain derived from the prompt's (the MTP head's: MtpSidecar; the draft model's:
// DraftHistory).
enum class PrefixRole { kPrompt, kMtpHead, kDraftModel };
const char* PrefixRoleName(PrefixRole role);  // "prompt", "mtp_head", "draft_model"

struct CachedPrefix {
  PrefixRole role = PrefixRole::kPrompt;
  std::string of_domain;   // a companion's: the domain of the prompts it follows; else ""
  std::string domain;      // the domain root (model, layout, tenant): 16 hex digits
  std::string root;        // the tree's root (first Block's ChainHash or Tail key): 16 hex digits
  uint64_t n_tokens = 0;   // the deepest cached position in the tree
  uint64_t created_unix_ms = 0;  // the oldest RAM entry's insert (this process); 0: unknown
  uint64_t used_unix_ms = 0;     // the newest insert or use in either tier
  PrefixTierView ram, disk;
};

// What EvictCachedPrefix dropped.
struct PrefixEviction {
  uint64_t ram_entries = 0;   // entries a restore in progress pinned stay
  uint64_t disk_records = 0;
};

// Counters since start, for /metrics. A plain copy; reading it takes a short lock.
struct EngineStats {
  bool cache_on = false;  // false: --no-cache, or no state of this model round-trips
  StateMode state_mode = StateMode::kSliced;  // how the cache stores states (see types.h)
  bool chunking_invariant = true;  // false: restored prefixes may change output in the last
                                   // bits (the model's graph depends on the chunking)
  bool capture_in_call = false;  // Snapshots captured inside prefill calls (llama.cpp patch
                                 // 0009): capture points do not end calls
  MemoryWarming memory_warming = MemoryWarming::kOff;  // CacheStack::memory_warming
  uint64_t requests = 0;
  // Images (--mmproj; all 0 without a projector): read from requests, encoded, found in the
  // encoder cache, and the bytes of embeddings it holds (engine/vision/projector.h).
  bool reads_images = false;
  uint64_t images_prepared = 0;
  uint64_t images_encoded = 0;
  uint64_t image_encoder_hits = 0;       // in RAM
  uint64_t image_encoder_hits_disk = 0;
  uint64_t image_encoder_hits_remote = 0;
  uint64_t image_encoder_bytes = 0;
  uint64_t image_tokens_restored = 0;  // image rows restored by the prompt cache
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t evaluated_tokens = 0;
  uint64_t generated_tokens = 0;
  std::string speculation;     // the spec types, comma-separated ("" : off)
  std::string spec_rollback;   // how rejected drafts are taken back (RollbackName)
  uint64_t draft_tokens = 0;    // drafted and verified
  uint64_t draft_accepted = 0;  // of which the target took
  uint64_t draft_steps = 0;
  // With a draft model: history tokens it decoded to catch up with the target's sequences, and
  // those its sequences got from the cache instead (DraftHistory).
  uint64_t draft_prefill_tokens = 0;
  uint64_t draft_restored_tokens = 0;
  uint64_t hits_slot = 0;  // the slot held the prefix: 0 bytes restored
  uint64_t hits_ram = 0;
  uint64_t hits_disk = 0;
  uint64_t hits_remote = 0;
  uint64_t restored_bytes = 0;  // state bytes set into sequences by restores
  uint64_t misses = 0;
  std::map<CacheMiss, uint64_t> misses_by_reason;
  std::map<CacheTier, uint64_t> bytes_by_tier;       // kRam, kDisk
  std::map<CacheTier, uint64_t> evictions_by_tier;
  std::map<CacheWork, uint64_t> cache_errors;        // reuse lost
  uint32_t slots_busy = 0;
  uint32_t queue_depth = 0;

  // Layout and tier limits, for the dashboard (the web page's /v1/cache/stats).
  std::string memory_layout;      // MemoryLayoutName of the model
  std::string devices;            // where its layers live (Model::devices())
  std::string backend_lost;       // "": serving; else why it cannot (Model::BackendStatus())
  std::string cache_type_k, cache_type_v;  // KvTypeName of the KV cache's K and V
  uint32_t block_size = 0;
  uint32_t snapshot_spacing = 0;  // the boundary Snapshots' grid (0: no Snapshots, or no cache)
  uint64_t ram_budget_bytes = 0;
  uint64_t disk_quota_bytes = 0;  // 0: no disk tier
  uint64_t ram_blocks = 0, ram_snapshots = 0, ram_tails = 0;  // entries the RAM tier holds
  uint64_t disk_records = 0;
  uint64_t disk_index_bytes = 0;  // the disk tier's index log, within disk_quota_bytes too
  std::map<RecordKind, uint64_t> disk_records_by_kind;
  std::vector<SlotView> slots;    // one per slot
  std::optional<RemoteTierStats> remote;  // set when serving with a shared tier
  // The process's payload buffers kept for reuse beyond the RAM tier's budget (BufferPool::
  // Shared); all zero without a RAM tier.
  BufferPoolStats buffer_pool;
};

// Adds a finished request to the counters: its tokens, drafts, restored bytes, and its cache
// outcome (a hit by tier, or a miss by reason; a request that never looked counts as kDisabled).
void CountRequest(EngineStats& stats, const CompletionResult& r);

}  // namespace prefixd::engine
