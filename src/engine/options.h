// EngineOptions: how an engine is built (model, context, slots, threads, cache tiers). A value
// type of its own so that the flags, the benches and the server can fill one without the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/block_listener.h"
#include "engine/vision/projector.h"
#include "util/aead.h"

namespace prefixd::engine {

// Speculative decoding, in llama-server's words (--spec-type and the --spec-* settings). The
// defaults are llama.cpp common's (common_params_speculative), so a flag left out means what it
// means to llama-server built from the same source.
enum class SpecType {
  kNgramSimple,   // ngram-simple: the last n-gram looked up in the context
  kNgramMapK,     // ngram-map-k: n-gram keys
  kNgramMapK4v,   // ngram-map-k4v: n-gram keys and 4 m-gram values
  kNgramMod,      // ngram-mod: a pool of hashed n-grams, kept across requests
  kDraft,         // draft: a smaller model of the same vocabulary (--model-draft)
  kDraftMtp,      // draft-mtp: the model's own multi-token-prediction (NextN) head
};

struct SpecOptions {
  std::vector<SpecType> types;  // empty: no speculation; several: tried in llama.cpp's order
  std::string draft_model_path;  // --model-draft (kDraft)
  int32_t draft_n_max = 3;       // tokens the draft model proposes at most per step
  int32_t draft_n_min = 0;       // a shorter draft is not verified
  float draft_p_min = 0.0f;      // the draft model stops below this probability
  int32_t ngram_mod_n_match = 24;
  int32_t ngram_mod_n_max = 64;
  int32_t ngram_mod_n_min = 48;
  // size_n, size_m, min_hits of ngram-simple, ngram-map-k and ngram-map-k4v, in that order.
  struct NgramMap {
    int32_t size_n = 12;
    int32_t size_m = 48;
    int32_t min_hits = 1;
  };
  NgramMap ngram_simple, ngram_map_k, ngram_map_k4v;

  bool enabled() const { return !types.empty(); }
};

// The element type of the KV cache's K or V tensors (llama-server's -ctk / -ctv). Part of the
// cache-layout fingerprint: a record saved under one type is never restored under another.
enum class KvType { kF32, kF16, kBF16, kQ8_0, kQ4_0 };

// "f32", "f16", "bf16", "q8_0", "q4_0": llama-server's names, and the fingerprint's.
const char* KvTypeName(KvType type);
// The type named so; nullopt for any other name.
std::optional<KvType> ParseKvType(const std::string& name);
// Whether the type is a block-quantized one (llama.cpp stores V quantized only with flash
// attention).
bool IsQuantized(KvType type);

// When the memory for the cache's payloads is made present ahead of their captures and
// restores (util/buffer_pool.h): fresh memory costs more than the copy into it.
enum class MemoryWarming {
  kAuto,    // kThread where the model leaves a host core free (its layers offloaded off the
            // host, or fewer model threads than cores), else kIdle
  kIdle,    // on the engine's thread, between requests
  kThread,  // on a thread of its own as soon as a size is taken, while the model computes too
            // (util/pool_warmer.h)
  kOff,     // never: every payload that no evicted one serves takes fresh memory
};

// "auto", "idle", "thread", "off": the flag's names.
const char* MemoryWarmingName(MemoryWarming warming);
// The warming named so; nullopt for any other name.
std::optional<MemoryWarming> ParseMemoryWarming(const std::string& name);

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
  // Told of every Block the RAM tier adds and drops (cache/block_listener.h), of the domain
  // of prompts without a tenant only, unless block_events_all_tenants. null: nobody.
  // REQUIRES: outlives the engine.
  cache::BlockListener* block_listener = nullptr;
  bool block_events_all_tenants = false;
  uint32_t n_slots = 1;
  // 0: the model's trained context length (each slot). Capped at the model's learned position
  // table (Model::n_pos_max(), e.g. gpt2) with a log line at start.
  uint32_t n_ctx_per_slot = 8192;
  uint32_t n_batch = 2048;
  uint32_t n_ubatch = 512;
  int n_threads = 0;                 // decode threads; 0: all cores
  int n_threads_batch = 0;           // prefill threads; 0: the same as n_threads
  bool cache_enabled = true;         // false: --no-cache, the cache fully off
  MemoryWarming memory_warming = MemoryWarming::kAuto;  // --warm-memory
  int n_gpu_layers = 0;
  // ggml RPC servers (HOST:PORT, llama-server's --rpc) whose devices may hold layers, and the
  // devices to use by name (--device; {"none"}: the CPU only). Both empty: llama.cpp's default
  // devices (engine/model/devices.h).
  std::vector<std::string> rpc_servers;
  std::vector<std::string> devices;
  KvType cache_type_k = KvType::kF16;  // part of the cache-layout fingerprint
  KvType cache_type_v = KvType::kF16;
  bool flash_attn = true;            // part of the cache-layout fingerprint (V layout)
  // --swa-full: a sliding-window model's window cache as large as the context. Without it an
  // iswa model's window layers keep a window plus a ubatch of cells (ContextOptions::swa_full:
  // every call is one ubatch, so a window captured inside a call is still there after it);
  // the other window layouts (hybrid, DSA, DeepSeek-V4) keep the full size either way.
  bool swa_full = false;
  size_t max_queue = 64;             // requests waiting for a slot beyond this are refused
  bool whole_state = false;          // Snapshots hold whole states even where the codec can
                                     // slice the model (--whole-state: a diagnostic)
  // Snapshots of recurrent states taken inside a prefill call where the model's graph can
  // (llama.cpp patch 0009), so capture points do not end calls; false (--cut-at-captures):
  // every capture point ends a call, as before the patch (a bench's comparison).
  bool capture_in_call = true;
  // A disk hit is read into the RAM tier and restored from there (the path before the direct restore;
  // a copy into fresh memory more) instead of from the files straight into the sequence. The
  // disk bench sets it to measure both paths in one run; no flag.
  bool disk_hits_through_ram = false;
  std::string chat_template;         // Jinja source replacing the model's template; "" keeps it
  SpecOptions spec;                  // off by default
  // --mmproj and its settings: a projector makes the model read images (engine/vision);
  // projector.path "" reads none.
  ProjectorOptions projector;
};

}  // namespace prefixd::engine
