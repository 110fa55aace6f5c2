// Engine: the cache-aware inference pipeline the server and the CLI talk to.
//
// A request's way through (DESIGN.md): mark capture points (memoized: only new messages are
// rendered), pick the Slot that holds the longest prefix of the prompt (a session continuing
// keeps it: nothing restored), else restore the longest restorable prefix (RAM tier, then disk,
// then the shared tier), prefill the rest in chunks that end exactly at capture points (taking
// snapshots there and slicing the new blocks from one ranged read of the new rows), generate,
// publish. Any failed check drops the entry and prefills cold.
//
// Thread-safety: every public method may be called from any thread. Complete() blocks the
// calling thread until its request finishes; requests run concurrently on n_slots slots with
// continuous batching on one scheduler thread that owns the llama context. Owns the Model,
// the Context, the PrefixCache and the DiskStore.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/types.h"
#include "engine/chat_output.h"
#include "engine/chat_template.h"
#include "engine/sampler.h"
#include "engine/types.h"
#include "store/redis_store.h"
#include "util/aead.h"
#include "util/status.h"

namespace prefixd::engine {

// The defaults here are every command's (the engine flags of engine/engine_flags.h start from
// EngineOptions{}), but where a command says it chooses its own.
struct EngineOptions {
  std::string model_path;
  std::string cache_dir;             // "" = no disk tier
  std::string remote_cache_url;      // "" = no shared tier; else redis://HOST:PORT[/DB]
  std::string remote_cache_password; // AUTH for the shared tier ("" = none)
  // Seal every record the disk and shared tiers hold under this key, and use only records
  // that verify under it (store/sealed_store.h). nullopt: records in the clear.
  std::optional<AeadKey> record_key;
  uint64_t ram_budget_bytes = 2ull << 30;
  uint64_t disk_quota_bytes = 20ull << 30;
  uint32_t block_size = 256;
  uint32_t n_slots = 1;
  // 0: the model's trained context length (each slot). Capped at the model's learned position
  // table (Model::n_pos_max(), e.g. gpt2) with a log line at start.
  uint32_t n_ctx_per_slot = 8192;
  uint32_t n_batch = 2048;
  uint32_t n_ubatch = 512;
  int n_threads = 0;                 // decode threads; 0: all cores
  int n_threads_batch = 0;           // prefill threads; 0: the same as n_threads
  bool cache_enabled = true;         // false: --no-cache, the cache fully off
  int n_gpu_layers = 0;
  bool flash_attn = true;            // part of the cache-layout fingerprint (V layout)
  size_t max_queue = 64;             // requests waiting for a slot beyond this are refused
  bool whole_state = false;          // Snapshots hold whole states even where the codec can
                                     // slice the model (--whole-state: a diagnostic)
  // A disk hit is read into the RAM tier and restored from there (the path before the direct restore;
  // a copy into fresh memory more) instead of from the files straight into the sequence. The
  // disk bench sets it to measure both paths in one run; no flag.
  bool disk_hits_through_ram = false;
  std::string chat_template;         // Jinja source replacing the model's template; "" keeps it
};

// A tokenized prompt and where its capture points are (absolute token positions).
// Where a chat prompt's preparation (before the request queues) spent its time, for the log.
struct PrepareTimes {
  double parse_ms = 0;     // the messages parsed by the template (common_chat_msgs_parse_oaicompat)
  double render_ms = 0;    // the whole conversation rendered
  double tokenize_ms = 0;  // its text tokenized (TokenMemo)
  double points_ms = 0;    // capture points found (ChatCapturePoints / TextCapturePoints)
};

struct Prompt {
  std::vector<Token> tokens;
  std::vector<int32_t> capture_points;  // message boundaries: system end, user starts, tail
  // Chat prompts: how the reply is constrained (grammar, stops) and read (parser). The engine
  // itself uses only output.special_tokens (rendered as text for the parser); the caller
  // moves the grammar into SamplingOptions and the stops into CompletionRequest::stop.
  OutputFormat output;
  PrepareTimes times;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;      // restored from the cache
  int32_t evaluated_tokens = 0;   // prompt tokens actually decoded
  int32_t prefill_chunks = 0;     // llama_decode calls the prefill took
  int32_t completion_tokens = 0;
  double prefill_ms = 0;          // restore + prompt evaluation
  double restore_ms = 0;          // of which: lookup, disk reads, assembly, state set
  double prompt_eval_ms = 0;      // of which: inside llama_decode (the model itself)
  uint64_t restored_bytes = 0;    // state bytes set into the sequence (0: the slot kept it)
  // Before the request queued, on its own thread: opening what the disk Tier adds to its
  // cached prefix (or, through RAM, reading it into the RAM Tier) and what the shared tier adds
  // (read into RAM). Not part of prefill_ms.
  double prefetch_ms = 0;
  double decode_ms = 0;
  double queue_ms = 0;
};

// Where a request's cached prefix came from, and why it reused nothing: the cache's own
// vocabulary (cache/types.h). kRam may mean a Snapshot set into a slot that kept its rows;
// kRemote, the shared tier read before the request queued.
using CacheTier = cache::Tier;
using CacheMiss = cache::MissReason;

// Why generation ended.
enum class FinishReason : uint8_t {
  kStop,       // end of generation or a stop string
  kLength,     // max_tokens, or the end of the slot's context
  kCancelled,  // the client went away (on_piece returned false, is_cancelled, shutdown)
};
// "stop", "length", "cancelled": the names logs use.
const char* FinishReasonName(FinishReason reason);

// Cache work that failed (reuse lost, the answer unaffected).
enum class CacheWork : uint8_t {
  kDomain,   // remembering the domain for `prefixd cache --model` (cache_dir/domains)
  kCapture,  // taking a Snapshot at a capture point
  kPublish,  // publishing Blocks, Snapshots and Tails
};
// "domain", "capture", "publish".
const char* CacheWorkName(CacheWork work);

// `counts` keyed by name (`name` of each key), for JSON and metrics; keys whose name is ""
// are left out.
template <typename Key>
std::map<std::string, uint64_t> CountsByName(const std::map<Key, uint64_t>& counts,
                                             const char* (*name)(Key)) {
  std::map<std::string, uint64_t> out;
  for (const auto& [key, n] : counts) {
    if (*name(key) != '\0') out[name(key)] += n;
  }
  return out;
}

// What the cache did for one request, for logs and metrics.
struct CacheOutcome {
  CacheTier tier = CacheTier::kNone;
  CacheMiss miss = CacheMiss::kNotMissed;
  int32_t diverged_at = -1;       // first token that differs from the longest cached path
  int32_t reusable_tokens = 0;    // longest prefix shared with anything cached (before -1)
};

struct CompletionRequest {
  Prompt prompt;
  int max_tokens = 256;
  SamplingOptions sampling;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  std::string tenant_salt;        // chosen by the server per API key, never by the client
  // Streaming: called on the scheduler thread with each new text piece; return false to cancel
  // (client gone). Keep it cheap.
  std::function<bool(const std::string& piece)> on_piece;
  // Polled on the scheduler thread before every prefill chunk: true cancels the request (the
  // client is gone), freeing its slot at the next chunk rather than after the whole prompt.
  // Keep it cheap. May be empty.
  std::function<bool()> is_cancelled;
};

struct CompletionResult {
  std::vector<Token> tokens;
  std::string text;
  // With SamplingOptions::top_logprobs >= 0: one entry per generated token (the end of
  // generation token excluded).
  std::vector<TokenLogprobs> logprobs;
  FinishReason finish_reason = FinishReason::kStop;
  std::string stop_word;          // the stop string that ended generation; "" when none did
  Usage usage;
  CacheOutcome cache;
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
struct CachedPrefix {
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
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t evaluated_tokens = 0;
  uint64_t generated_tokens = 0;
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
  uint32_t block_size = 0;
  uint64_t ram_budget_bytes = 0;
  uint64_t disk_quota_bytes = 0;  // 0: no disk tier
  uint64_t ram_blocks = 0, ram_snapshots = 0, ram_tails = 0;  // entries the RAM tier holds
  uint64_t disk_records = 0;
  std::map<store::RecordKind, uint64_t> disk_records_by_kind;
  std::vector<SlotView> slots;    // one per slot
  std::optional<store::RedisStoreStats> remote;  // set when serving with a shared tier
};

class Engine {
 public:
  // Loads the model and starts the scheduler. InvalidArgument when the model cannot serve
  // causal completions (Model::Load says why) or the options are out of range.
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();

  // Renders an OpenAI messages array (JSON text) with the chat template and marks the
  // message boundaries as capture points. Remembers what it learnt of each prefix (a bounded
  // RenderMemo), so a continuing conversation renders only its new messages again.
  // `options` go into the full render and every prefix render alike; the Prompt's output says
  // how the reply is constrained and read. InvalidArgument when the messages or the options
  // do not render.
  Result<Prompt> PrepareChat(const std::string& messages_json,
                             const ChatRenderOptions& options) const;
  Result<Prompt> PrepareChat(const std::string& messages_json, const std::string& tools_json,
                             bool add_generation_prompt = true) const;
  // Tokenizes raw completion text (special tokens parsed); the chat format's special tokens
  // (<|im_start|>, <|im_end|>) mark the capture points.
  // `memo_scope`: as ChatRenderOptions::memo_scope.
  Result<Prompt> PrepareText(const std::string& text, const std::string& memo_scope = "") const;

  // Runs one request to completion. ResourceExhausted when the queue is full (the server
  // answers 503), InvalidArgument when the prompt does not fit the context.
  Result<CompletionResult> Complete(CompletionRequest request);

  std::vector<Token> Tokenize(const std::string& text) const;
  std::string Detokenize(const std::vector<Token>& tokens) const;
  const std::string& model_name() const;
  // The context each slot has, after the cap (EngineOptions::n_ctx_per_slot).
  uint32_t n_ctx_per_slot() const;
  // requested by server: the vocabulary size, so that token ids from clients (/detokenize,
  // /v1/completions with a token-array prompt) are checked before they reach llama.cpp.
  int32_t n_vocab() const;
  EngineStats GetStats() const;
  Status ClearCache();
  // The prefix trees the tiers hold, merged over RAM and disk: every domain's, or only the
  // domain of `*tenant_salt` when it is not null. O(entries + disk records); reads no payload.
  std::vector<CachedPrefix> ListCachedPrefixes(const std::string* tenant_salt) const;
  // The domain id (CachedPrefix::domain, SlotView::domain) of a tenant salt's entries.
  std::string DomainIdOf(const std::string& tenant_salt) const;
  // Evicts the prefix tree `root` of `domain` (CachedPrefix's hex ids) from RAM and disk; idle
  // slots forget their sequences before the next request (as after ClearCache), so nothing
  // evicted is reused. NotFound when no tier holds it.
  Result<PrefixEviction> EvictCachedPrefix(const std::string& domain, const std::string& root);
  // Waits until everything published so far is written to the disk and the shared tier (or
  // dropped there).
  void FlushCache();

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::engine
