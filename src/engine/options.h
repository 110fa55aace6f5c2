// EngineOptions: how an engine is built (model, context, slots, threads, cache tiers). A value
// type of its own so that the flags, the benches and the server can fill one without the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "util/aead.h"

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

}  // namespace prefixd::engine
