#include "engine/engine_flags.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/chat/pinned_assets.h"
#include "engine/speculation.h"
#include "util/env.h"

namespace prefixd::engine {

namespace {

bool Has(EngineFlagSet set, EngineFlagSet group) {
  return (uint32_t(set) & uint32_t(group)) != 0;
}

// --cache-dir, --ram-budget, --disk-quota, --block-size.
void DeclareCacheFlags(Flags& flags, EngineFlagValues& v, EngineFlagSet which) {
  if (Has(which, EngineFlagSet::kCacheDir)) {
    flags.String("--cache-dir", &v.cache_dir,
                 "disk cache directory (default: $XDG_CACHE_HOME/prefixd or ~/.cache/prefixd; "
                 "'none': RAM only)");
  }
  if (Has(which, EngineFlagSet::kCacheSizes)) {
    flags.String("--ram-budget", &v.ram_budget, "bytes the RAM tier may hold (e.g. 2G)");
    flags.String("--disk-quota", &v.disk_quota, "bytes the disk tier may hold (e.g. 20G)");
  }
  if (Has(which, EngineFlagSet::kBlockSize)) {
    flags.Int("--block-size", &v.block_size, "cache block size in tokens");
  }
}

// --slots, --ctx, --threads, --threads-batch, --batch, --ubatch, --gpu-layers, --max-queue.
void DeclareComputeFlags(Flags& flags, EngineFlagValues& v, EngineFlagSet which) {
  if (Has(which, EngineFlagSet::kSlots)) {
    flags.Int("--slots", &v.slots, "requests generated at once (continuous batching)");
  }
  if (Has(which, EngineFlagSet::kContext)) {
    flags.Int("-c,--ctx", &v.ctx,
              "context length of each slot, in tokens; 0: the model's trained context length");
  }
  if (Has(which, EngineFlagSet::kThreads)) {
    flags.Int("-t,--threads", &v.threads, "CPU threads for generation; 0: all cores");
    flags.Int("-tb,--threads-batch", &v.threads_batch,
              "CPU threads for prompt processing; 0: the same as --threads");
    flags.String("--warm-memory", &v.warm_memory,
                 "when memory for cache payloads is made present ahead of use: idle (between "
                 "requests), thread (also while the model computes, on a thread of its own), "
                 "off; auto: thread where the model leaves a core free (layers on a GPU, or "
                 "fewer threads than cores), else idle");
  }
  if (Has(which, EngineFlagSet::kBatch)) {
    flags.Int("--batch", &v.batch, "logical batch size (prefill chunk)");
    flags.Int("--ubatch", &v.ubatch, "physical batch size");
  }
  if (Has(which, EngineFlagSet::kGpuLayers)) {
    flags.Int("-ngl,--gpu-layers", &v.gpu_layers,
              "layers to offload to the GPU or RPC devices; -1: all");
    flags.String("--rpc", &v.rpc,
                 "ggml RPC servers whose devices hold layers, HOST:PORT,... (llama.cpp's "
                 "rpc-server; docs/backends.md)");
    flags.String("-dev,--device", &v.device,
                 "devices for the layers, NAME,... (RPC0, CUDA0, ...; 'none': the CPU only); "
                 "default: the RPC servers', then the GPUs");
  }
  if (Has(which, EngineFlagSet::kMaxQueue)) {
    flags.Int("--max-queue", &v.max_queue,
              "requests that may wait for a slot; more get 503 with Retry-After");
  }
}

// --no-cache, --whole-state, --no-flash-attn, --chat-template, the shared tier's.
void DeclareModeFlags(Flags& flags, EngineFlagValues& v, EngineFlagSet which) {
  if (Has(which, EngineFlagSet::kNoCache)) {
    flags.Bool("--no-cache", &v.no_cache, "turn the prompt cache fully off");
  }
  if (Has(which, EngineFlagSet::kWholeState)) {
    flags.Bool("--whole-state", &v.whole_state,
               "cache whole-state snapshots even where the state codec can slice the model "
               "(a diagnostic: larger; models the codec cannot slice use them anyway)");
    flags.Bool("--cut-at-captures", &v.cut_at_captures,
               "end a prefill call at every capture point instead of capturing recurrent "
               "states inside the call (the schedule before llama.cpp patch 0009; for benches)");
  }
  if (Has(which, EngineFlagSet::kFlashAttn)) {
    flags.Bool("--no-flash-attn", &v.no_flash_attn, "run attention without flash attention");
    flags.Bool("--swa-full", &v.swa_full,
               "keep a sliding-window model's window layers for the whole context instead of "
               "a window plus a ubatch of cells (more memory and attention; the cache reuses "
               "prefixes either way)");
    flags.String("-ctk,--cache-type-k", &v.cache_type_k,
                 "KV cache type of K: f32, f16, bf16, q8_0, q4_0");
    flags.String("-ctv,--cache-type-v", &v.cache_type_v,
                 "KV cache type of V (quantized only with flash attention)");
  }
  if (Has(which, EngineFlagSet::kChatTemplate)) {
    flags.String("--chat-template", &v.chat_template,
                 "chat template replacing the model's: a .jinja file, or the NAME of one the "
                 "pinned llama.cpp ships (models/templates/NAME.jinja, e.g. Qwen3.5-4B)");
  }
  if (Has(which, EngineFlagSet::kRemoteCache)) v.remote.Declare(flags);
}

// llama-server's names and meanings.
void DeclareProjectorFlags(Flags& flags, EngineFlagValues& v) {
  flags.String("-mm,--mmproj", &v.mmproj,
               "multimodal projector GGUF of the model: it reads images (chat image_url parts, "
               "Responses input_image, Anthropic image blocks); each image is encoded once and "
               "its rows cached like text");
  flags.Bool("--no-mmproj-offload", &v.no_mmproj_offload,
             "keep the projector on the CPU, whatever device the model's layers are on");
  flags.Int("--image-min-tokens", &v.image_min_tokens,
            "fewest tokens an image becomes (dynamic-resolution projectors); -1: the projector's");
  flags.Int("--image-max-tokens", &v.image_max_tokens,
            "most tokens an image becomes (dynamic-resolution projectors); -1: the projector's");
}

void DeclareNgramMapFlags(Flags& flags, EngineFlagValues::Spec::Map& m, const std::string& name) {
  const std::string f = "--spec-ngram-" + name;
  flags.Int(f + "-size-n", &m.size_n, name + ": n-gram size for the lookup");
  flags.Int(f + "-size-m", &m.size_m, name + ": m-gram size of the tokens drafted");
  flags.Int(f + "-min-hits", &m.min_hits, name + ": hits an m-gram needs to be drafted");
}

// llama-server's speculation flags (common/arg.cpp), with its names and defaults.
void DeclareSpecFlags(Flags& flags, EngineFlagValues::Spec& v) {
  flags.String("--spec-type", &v.types,
               "speculative decoding: none, or one or more of ngram-mod, ngram-simple, "
               "ngram-map-k, ngram-map-k4v, draft-simple, comma-separated; or draft-mtp "
               "alone, the model's own NextN head (docs/speculation.md)");
  flags.String("-md,--model-draft", &v.draft_model, "draft model (--spec-type draft)");
  flags.Int("--spec-draft-n-max", &v.draft_n_max, "draft model: tokens drafted at most");
  flags.Int("--spec-draft-n-min", &v.draft_n_min, "draft model: fewest tokens worth verifying");
  flags.Double("--spec-draft-p-min", &v.draft_p_min,
               "draft model: stop drafting below this probability");
  flags.Int("--spec-ngram-mod-n-match", &v.mod_n_match, "ngram-mod: n-gram length looked up");
  flags.Int("--spec-ngram-mod-n-max", &v.mod_n_max, "ngram-mod: tokens drafted at most");
  flags.Int("--spec-ngram-mod-n-min", &v.mod_n_min, "ngram-mod: fewest tokens worth verifying");
  DeclareNgramMapFlags(flags, v.simple, "simple");
  DeclareNgramMapFlags(flags, v.map_k, "map-k");
  DeclareNgramMapFlags(flags, v.map_k4v, "map-k4v");
}

Result<SpecOptions::NgramMap> ToNgramMap(const EngineFlagValues::Spec::Map& m,
                                         const std::string& name) {
  if (m.size_n < 1 || m.size_n > 1024 || m.size_m < 1 || m.size_m > 1024 || m.min_hits < 1 ||
      m.min_hits > 65535) {
    return Status::InvalidArgument("--spec-ngram-" + name +
                                   "-*: size-n and size-m 1..1024, min-hits 1..65535");
  }
  return SpecOptions::NgramMap{int32_t(m.size_n), int32_t(m.size_m), int32_t(m.min_hits)};
}

Result<SpecOptions> ToSpecOptions(const EngineFlagValues::Spec& v) {
  SpecOptions o;
  PREFIXD_ASSIGN_OR_RETURN(o.types, ParseSpecTypes(v.types));
  if (!v.draft_model.empty() &&
      std::find(o.types.begin(), o.types.end(), SpecType::kDraft) == o.types.end()) {
    o.types.push_back(SpecType::kDraft);  // llama-server: a draft model implies draft-simple
  }
  o.draft_model_path = v.draft_model;
  if (v.draft_n_max < 0 || v.draft_n_max > 256 || v.draft_n_min < 0 ||
      v.draft_n_min > v.draft_n_max || v.draft_p_min < 0 || v.draft_p_min > 1) {
    return Status::InvalidArgument(
        "--spec-draft-n-max 0..256, --spec-draft-n-min 0..n-max, --spec-draft-p-min 0..1");
  }
  if (v.mod_n_match < 1 || v.mod_n_match > 1024 || v.mod_n_max < 1 || v.mod_n_max > 256 ||
      v.mod_n_min < 0 || v.mod_n_min > v.mod_n_max) {
    return Status::InvalidArgument(
        "--spec-ngram-mod-n-match 1..1024, -n-max 1..256, -n-min 0..n-max");
  }
  o.draft_n_max = int32_t(v.draft_n_max);
  o.draft_n_min = int32_t(v.draft_n_min);
  o.draft_p_min = float(v.draft_p_min);
  o.ngram_mod_n_match = int32_t(v.mod_n_match);
  o.ngram_mod_n_max = int32_t(v.mod_n_max);
  o.ngram_mod_n_min = int32_t(v.mod_n_min);
  PREFIXD_ASSIGN_OR_RETURN(o.ngram_simple, ToNgramMap(v.simple, "simple"));
  PREFIXD_ASSIGN_OR_RETURN(o.ngram_map_k, ToNgramMap(v.map_k, "map-k"));
  PREFIXD_ASSIGN_OR_RETURN(o.ngram_map_k4v, ToNgramMap(v.map_k4v, "map-k4v"));
  return o;
}

Status CheckRanges(const EngineFlagValues& v) {
  if (v.slots < 1 || v.slots > 256) return Status::InvalidArgument("--slots: 1..256");
  for (auto [n, flag] : {std::pair{v.image_min_tokens, "--image-min-tokens"},
                         std::pair{v.image_max_tokens, "--image-max-tokens"}}) {
    if (n != -1 && (n < 1 || n > (1 << 20))) {
      return Status::InvalidArgument(std::string(flag) + ": -1 (the projector's) or 1..1048576");
    }
  }
  if (v.ctx != 0 && (v.ctx < 16 || v.ctx > (1 << 24))) {
    return Status::InvalidArgument("--ctx: 0 (the model's) or 16..16777216");
  }
  if (v.block_size < 1 || v.block_size > (1 << 20)) {
    return Status::InvalidArgument("--block-size: 1..1048576");
  }
  if (v.max_queue < 0 || v.max_queue > 100000) {
    return Status::InvalidArgument("--max-queue: 0..100000");
  }
  if (v.threads < 0 || v.threads_batch < 0 || v.batch < 1 || v.ubatch < 1 || v.gpu_layers < -1) {
    return Status::InvalidArgument(
        "--threads, --threads-batch, --batch, --ubatch, --gpu-layers: out of range");
  }
  return Status::OK();
}

Result<KvType> ToKvType(const std::string& flag, const std::string& name) {
  if (std::optional<KvType> type = ParseKvType(name)) return *type;
  return Status::InvalidArgument(flag + ": '" + name + "' is not f32, f16, bf16, q8_0 or q4_0");
}

// --rpc, --device, --cache-type-k, --cache-type-v, --warm-memory.
Status SetPlacement(const EngineFlagValues& v, EngineOptions& eo) {
  eo.rpc_servers = SplitList(v.rpc);
  eo.devices = SplitList(v.device);
  if (eo.devices.size() > 1 &&
      std::find(eo.devices.begin(), eo.devices.end(), "none") != eo.devices.end()) {
    return Status::InvalidArgument("--device: 'none' (the CPU only) stands alone");
  }
  if (std::optional<MemoryWarming> w = ParseMemoryWarming(v.warm_memory)) {
    eo.memory_warming = *w;
  } else {
    return Status::InvalidArgument("--warm-memory: '" + v.warm_memory +
                                   "' is not auto, idle, thread or off");
  }
  PREFIXD_ASSIGN_OR_RETURN(eo.cache_type_k, ToKvType("--cache-type-k", v.cache_type_k));
  PREFIXD_ASSIGN_OR_RETURN(eo.cache_type_v, ToKvType("--cache-type-v", v.cache_type_v));
  if (IsQuantized(eo.cache_type_v) && !eo.flash_attn) {
    return Status::InvalidArgument("--cache-type-v " + v.cache_type_v +
                                   ": a quantized V cache needs flash attention "
                                   "(drop --no-flash-attn)");
  }
  return Status::OK();
}

// The numbers and switches, once CheckRanges passed.
void SetNumbers(const EngineFlagValues& v, EngineOptions& eo) {
  eo.block_size = uint32_t(v.block_size);
  eo.n_slots = uint32_t(v.slots);
  eo.n_ctx_per_slot = uint32_t(v.ctx);
  eo.n_batch = uint32_t(v.batch);
  eo.n_ubatch = uint32_t(v.ubatch);
  eo.n_threads = int(v.threads);
  eo.n_threads_batch = int(v.threads_batch);
  eo.n_gpu_layers = int(v.gpu_layers);
  eo.max_queue = size_t(v.max_queue);
  eo.cache_enabled = !v.no_cache;
  eo.whole_state = v.whole_state;
  eo.capture_in_call = !v.cut_at_captures;
  eo.flash_attn = !v.no_flash_attn;
  eo.swa_full = v.swa_full;
}

}  // namespace

void RemoteCacheFlags::Declare(Flags& flags) {
  flags.String("--remote-cache", &url,
               "shared cache tier on Redis, redis://HOST:PORT[/DB], used by every server given "
               "the same URL (docs/deployment.md); no TLS (Debian's hiredis has none)");
  flags.String("--remote-cache-password-file", &password_file,
               "file whose first line is the Redis password (AUTH)");
}

Result<std::string> RemoteCacheFlags::Password() const {
  if (password_file.empty()) return std::string();
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Env::Default()->ReadFile(password_file));
  std::string text(bytes.begin(), bytes.end());
  text = text.substr(0, text.find('\n'));
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.empty()) {
    return Status::InvalidArgument("--remote-cache-password-file " + password_file + " is empty");
  }
  return text;
}

void DeclareEngineFlags(Flags& flags, EngineFlagValues& values, EngineFlagSet which) {
  if (Has(which, EngineFlagSet::kModel)) {
    flags.String("-m,--model", &values.model, "GGUF model file (required)");
  }
  DeclareCacheFlags(flags, values, which);
  DeclareComputeFlags(flags, values, which);
  DeclareModeFlags(flags, values, which);
  if (Has(which, EngineFlagSet::kSpeculation)) DeclareSpecFlags(flags, values.spec);
  if (Has(which, EngineFlagSet::kProjector)) DeclareProjectorFlags(flags, values);
}

Result<EngineOptions> ToEngineOptions(const EngineFlagValues& values) {
  PREFIXD_RETURN_IF_ERROR(CheckRanges(values));
  EngineOptions eo;
  eo.model_path = values.model;
  if (values.cache_dir != "none" && !values.no_cache) eo.cache_dir = values.cache_dir;
  PREFIXD_ASSIGN_OR_RETURN(eo.ram_budget_bytes, ParseByteSize("--ram-budget", values.ram_budget));
  PREFIXD_ASSIGN_OR_RETURN(eo.disk_quota_bytes, ParseByteSize("--disk-quota", values.disk_quota));
  if (!values.no_cache) {
    eo.remote_cache_url = values.remote.url;
    PREFIXD_ASSIGN_OR_RETURN(eo.remote_cache_password, values.remote.Password());
  }
  SetNumbers(values, eo);
  PREFIXD_RETURN_IF_ERROR(SetPlacement(values, eo));
  PREFIXD_ASSIGN_OR_RETURN(eo.spec, ToSpecOptions(values.spec));
  eo.projector.path = values.mmproj;
  eo.projector.offload = !values.no_mmproj_offload;
  eo.projector.image_min_tokens = int(values.image_min_tokens);
  eo.projector.image_max_tokens = int(values.image_max_tokens);
  if (!values.chat_template.empty()) {
    Result<std::string> source = LoadTemplateSource(values.chat_template);
    if (!source.ok()) {
      return Status::InvalidArgument("--chat-template: " + source.status().ToString());
    }
    eo.chat_template = std::move(source).value();
  }
  return eo;
}

}  // namespace prefixd::engine
