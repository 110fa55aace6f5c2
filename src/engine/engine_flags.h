// The engine's flags, defined once for every program that starts an Engine from its command
// line (`prefixd serve`, `prefixd run`, prefixd_engine_bench, prefixd_disk_bench): each flag's
// names, help text, default and range check.
//
// A program declares the groups it takes (DeclareEngineFlags), parses, then turns the values
// into EngineOptions (ToEngineOptions). The defaults are EngineOptions{}'s; a program that
// chooses its own (serve: 2 slots and the model's context) sets them in EngineFlagValues before
// declaring, and its --help shows them. A program whose meaning of a flag is narrower than
// serve's (run's --cache-dir has no default directory) declares that flag itself, into the
// same field, so that its value still goes through ToEngineOptions.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "util/flags.h"
#include "util/status.h"

namespace prefixd::engine {

// The shared tier's flags: --remote-cache redis://HOST:PORT[/DB] and
// --remote-cache-password-file FILE. Part of the engine flags (EngineFlagSet::kRemoteCache);
// `prefixd cache stats` declares them alone.
struct RemoteCacheFlags {
  std::string url;            // "" : no shared tier
  std::string password_file;  // "" : no AUTH

  void Declare(Flags& flags);
  // The password: the file's first line (a trailing newline and CR are dropped); "" without a
  // file. IOError when the file cannot be read, InvalidArgument when it is empty.
  Result<std::string> Password() const;
};

// The engine flags' values as parsed: sizes as text ("2G") and numbers as int64_t, so that
// ToEngineOptions, not the parser, says what is wrong with a value.
struct EngineFlagValues {
  std::string model;
  std::string cache_dir;  // "" or "none": no disk tier (serve puts its default dir in for "")
  std::string ram_budget = ByteSizeText(EngineOptions{}.ram_budget_bytes);
  std::string disk_quota = ByteSizeText(EngineOptions{}.disk_quota_bytes);
  int64_t block_size = EngineOptions{}.block_size;
  int64_t slots = EngineOptions{}.n_slots;
  int64_t ctx = EngineOptions{}.n_ctx_per_slot;  // 0: the model's trained context
  int64_t threads = EngineOptions{}.n_threads;
  int64_t threads_batch = EngineOptions{}.n_threads_batch;
  std::string warm_memory = MemoryWarmingName(EngineOptions{}.memory_warming);
  int64_t batch = EngineOptions{}.n_batch;
  int64_t ubatch = EngineOptions{}.n_ubatch;
  int64_t gpu_layers = EngineOptions{}.n_gpu_layers;
  std::string rpc;     // --rpc HOST:PORT,...
  std::string device;  // --device NAME,... ("none": the CPU only)
  int64_t max_queue = int64_t(EngineOptions{}.max_queue);
  bool no_cache = false;
  bool whole_state = false;
  bool cut_at_captures = false;
  bool no_flash_attn = false;
  bool swa_full = false;
  std::string cache_type_k = KvTypeName(EngineOptions{}.cache_type_k);
  std::string cache_type_v = KvTypeName(EngineOptions{}.cache_type_v);
  std::string chat_template;  // NAME of a pinned template or a .jinja file; "" : the model's
  RemoteCacheFlags remote;
  std::string mmproj;           // --mmproj FILE ("": the model reads no images)
  bool no_mmproj_offload = false;
  int64_t image_min_tokens = ProjectorOptions{}.image_min_tokens;
  int64_t image_max_tokens = ProjectorOptions{}.image_max_tokens;
  // Speculative decoding, in llama-server's flags; numbers default to SpecOptions{}'s.
  struct Spec {
    std::string types;        // --spec-type a,b ("" or none: off)
    std::string draft_model;  // --model-draft
    int64_t draft_n_max = SpecOptions{}.draft_n_max;
    int64_t draft_n_min = SpecOptions{}.draft_n_min;
    double draft_p_min = SpecOptions{}.draft_p_min;
    int64_t mod_n_match = SpecOptions{}.ngram_mod_n_match;
    int64_t mod_n_max = SpecOptions{}.ngram_mod_n_max;
    int64_t mod_n_min = SpecOptions{}.ngram_mod_n_min;
    struct Map {
      int64_t size_n = SpecOptions::NgramMap{}.size_n;
      int64_t size_m = SpecOptions::NgramMap{}.size_m;
      int64_t min_hits = SpecOptions::NgramMap{}.min_hits;
    };
    Map simple, map_k, map_k4v;
  } spec;
};

// The groups of engine flags, as bits to combine with |. DeclareEngineFlags declares a set's
// flags in the order of these bits, which is `prefixd serve --help`'s; a program that lists them
// in another order, or has flags of its own between them, declares them a set at a time.
enum class EngineFlagSet : uint32_t {
  kModel = 1u << 0,         // -m,--model, which the program requires (and checks itself)
  kCacheDir = 1u << 1,      // --cache-dir
  kCacheSizes = 1u << 2,    // --ram-budget, --disk-quota
  kBlockSize = 1u << 3,     // --block-size
  kSlots = 1u << 4,         // --slots
  kContext = 1u << 5,       // -c,--ctx
  kThreads = 1u << 6,       // -t,--threads, -tb,--threads-batch, --warm-memory
  kBatch = 1u << 7,         // --batch, --ubatch
  kGpuLayers = 1u << 8,     // -ngl,--gpu-layers, --rpc, -dev,--device
  kMaxQueue = 1u << 9,      // --max-queue
  kNoCache = 1u << 10,      // --no-cache
  kWholeState = 1u << 11,   // --whole-state
  kFlashAttn = 1u << 12,    // --no-flash-attn, -ctk,--cache-type-k, -ctv,--cache-type-v
  kChatTemplate = 1u << 13, // --chat-template
  kRemoteCache = 1u << 14,  // --remote-cache, --remote-cache-password-file
  kSpeculation = 1u << 15,  // --spec-type, --model-draft, --spec-draft-*, --spec-ngram-*
  kProjector = 1u << 16,    // --mmproj, --no-mmproj-offload, --image-min/max-tokens
};

constexpr EngineFlagSet operator|(EngineFlagSet a, EngineFlagSet b) {
  return EngineFlagSet(uint32_t(a) | uint32_t(b));
}

// Declares the flags of the groups in `which` on `flags`, each targeting its field of `values`
// (whose contents now are the defaults --help shows). A flag of a group not declared is an
// unknown flag to flags.Parse().
// REQUIRES: `values` outlives flags.Parse(); no group is declared twice on the same `flags`.
void DeclareEngineFlags(Flags& flags, EngineFlagValues& values, EngineFlagSet which);

// The EngineOptions that `values` ask for; fields no flag sets keep EngineOptions{}'s, so
// ToEngineOptions(EngineFlagValues{}) equals EngineOptions{}. Checks every value, declared or
// not (an undeclared one holds its default, which passes): InvalidArgument naming the flag
// for a number out of range or a size that does not parse; the password file's error, and
// the chat template's prefixed with its flag, when one cannot be read.
// --no-cache turns the cache off and drops the disk dir and the shared tier; --cache-dir
// none means no disk tier.
Result<EngineOptions> ToEngineOptions(const EngineFlagValues& values);

}  // namespace prefixd::engine
