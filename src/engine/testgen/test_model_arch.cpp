// Per-architecture hyper-parameters of the test models, written as GGUF keys
// ("<arch>.block_count", ...; the key names are llama.cpp's src/llama-arch.cpp).
//
// Each arch starts from the shape's BaseDims and changes what its real models change: layer
// patterns (which layers are attention, recurrent, MLP), head sizes, experts, windows.
#include <algorithm>
#include <functional>
#include <map>

#include "engine/testgen/test_model.h"
#include "engine/testgen/test_model_internal.h"

namespace prefixd::engine::test_model {
namespace {

// Writes "<arch>.<key>" values.
class Keys {
 public:
  Keys(gguf_context* ctx, std::string arch) : ctx_(ctx), arch_(std::move(arch)) {}
  void U32(const std::string& key, uint32_t v) { gguf_set_val_u32(ctx_, K(key).c_str(), v); }
  void F32(const std::string& key, float v) { gguf_set_val_f32(ctx_, K(key).c_str(), v); }
  void U32s(const std::string& key, const std::vector<uint32_t>& v) {
    gguf_set_arr_data(ctx_, K(key).c_str(), GGUF_TYPE_UINT32, v.data(), v.size());
  }
  void I32s(const std::string& key, const std::vector<int32_t>& v) {
    gguf_set_arr_data(ctx_, K(key).c_str(), GGUF_TYPE_INT32, v.data(), v.size());
  }
  void Bools(const std::string& key, const std::string& pattern, char on) {
    std::vector<int8_t> v;
    for (char p : pattern) v.push_back(p == on ? 1 : 0);
    gguf_set_arr_data(ctx_, K(key).c_str(), GGUF_TYPE_BOOL, v.data(), v.size());
  }

 private:
  std::string K(const std::string& key) const { return arch_ + "." + key; }
  gguf_context* ctx_;
  std::string arch_;
};

bool IsTiny(const BaseDims& d) { return d.n_embd <= 128; }

// Per-layer values: `on` where pattern[il] == c, else 0.
std::vector<uint32_t> Where(const std::string& pattern, char c, uint32_t on) {
  std::vector<uint32_t> out;
  for (char p : pattern) out.push_back(p == c ? on : 0);
  return out;
}

std::string Repeat(const std::string& unit, uint32_t n_layer) {
  std::string out;
  while (out.size() < n_layer) out += unit;
  out.resize(n_layer);
  return out;
}

void Attention(Keys& k, const BaseDims& d) {
  k.U32("attention.head_count", d.n_head);
  k.U32("attention.head_count_kv", d.n_head_kv);
  k.U32("attention.key_length", d.head_dim);
  k.U32("attention.value_length", d.head_dim);
}

// Every 4th layer of the DeltaNet hybrids is full attention.
constexpr uint32_t kFullAttentionInterval = 4;

// Gated DeltaNet dims shared by qwen35 and qwen3next: k heads, v heads, head size.
void DeltaNet(Keys& k, const BaseDims& d) {
  const uint32_t head = IsTiny(d) ? 16 : 128;
  const uint32_t n_k = IsTiny(d) ? 2 : 16;
  const uint32_t n_v = IsTiny(d) ? 4 : (d.n_embd >= 2048 ? 32 : 16);
  k.U32("ssm.conv_kernel", 4);
  k.U32("ssm.state_size", head);
  k.U32("ssm.group_count", n_k);
  k.U32("ssm.time_step_rank", n_v);
  k.U32("ssm.inner_size", head * n_v);
  k.U32("full_attention_interval", kFullAttentionInterval);
}

// Mamba-2 mixer dims: d_inner = 2 n_embd split into heads of 16 (tiny) or 64 channels.
void Mamba2(Keys& k, const BaseDims& d, uint32_t n_group) {
  const uint32_t d_inner = 2 * d.n_embd;
  k.U32("ssm.conv_kernel", 4);
  k.U32("ssm.inner_size", d_inner);
  k.U32("ssm.state_size", IsTiny(d) ? 16 : 128);
  k.U32("ssm.group_count", n_group);
  k.U32("ssm.time_step_rank", d_inner / (IsTiny(d) ? 16 : 64));
}

uint32_t Layers(const BaseDims& d, uint32_t small, uint32_t medium) {
  if (IsTiny(d)) return d.n_layer;
  return d.n_embd <= 1024 ? small : medium;
}

uint32_t Llama(Keys& k, BaseDims d) {
  Attention(k, d);
  k.U32("rope.dimension_count", d.head_dim);
  k.F32("rope.freq_base", 500000.0f);
  k.U32("feed_forward_length", d.n_ff);
  return d.n_layer;
}

uint32_t Qwen35(Keys& k, BaseDims d) {
  d.n_layer = Layers(d, 24, 32);
  d.head_dim = IsTiny(d) ? 32 : 256;
  Attention(k, d);
  const uint32_t n_rot = d.head_dim / 4;  // partial rotary
  const uint32_t half = n_rot / 2, s = half / 3, rem = half % 3;
  k.U32("rope.dimension_count", n_rot);
  k.I32s("rope.dimension_sections",
         {int32_t(s + (rem > 0)), int32_t(s + (rem > 1)), int32_t(s), 0});
  k.F32("rope.freq_base", 10000000.0f);
  k.U32("feed_forward_length", d.n_ff);
  DeltaNet(k, d);
  return d.n_layer;
}

uint32_t Qwen3Next(Keys& k, BaseDims d) {
  d.n_layer = Layers(d, 24, 32);
  d.head_dim = IsTiny(d) ? 32 : 256;
  Attention(k, d);
  k.U32("rope.dimension_count", d.head_dim / 4);
  k.F32("rope.freq_base", 10000000.0f);
  k.U32("feed_forward_length", d.n_ff);
  k.U32("expert_count", IsTiny(d) ? 4 : 32);
  k.U32("expert_used_count", IsTiny(d) ? 2 : 4);
  k.U32("expert_feed_forward_length", IsTiny(d) ? 64 : (d.n_embd <= 1024 ? 256 : 384));
  k.U32("expert_shared_feed_forward_length", IsTiny(d) ? 64 : 512);
  DeltaNet(k, d);
  return d.n_layer;
}

// Nemotron-H: M = Mamba-2, * = attention, - = MLP (squared ReLU); one kind per layer.
uint32_t NemotronH(Keys& k, BaseDims d) {
  const std::string pattern = IsTiny(d) ? "M-*-" : Repeat("M-M-M*-", Layers(d, 28, 35));
  d.n_layer = uint32_t(pattern.size());
  k.U32("attention.head_count", d.n_head);
  k.U32s("attention.head_count_kv", Where(pattern, '*', d.n_head_kv));
  k.U32("attention.key_length", d.head_dim);
  k.U32("attention.value_length", d.head_dim);
  k.U32s("feed_forward_length", Where(pattern, '-', d.n_ff));
  k.F32("attention.layer_norm_epsilon", 1e-5f);
  Mamba2(k, d, IsTiny(d) ? 2 : 8);
  return d.n_layer;
}

// Granite 4.0-H: Mamba-2 layers with an attention layer every few, SwiGLU FFN in every layer.
uint32_t GraniteHybrid(Keys& k, BaseDims d) {
  d.n_layer = Layers(d, 28, 36);
  const std::string pattern = Repeat(IsTiny(d) ? "MM*M" : "MMMMM*", d.n_layer);
  k.U32("attention.head_count", d.n_head);
  k.U32s("attention.head_count_kv", Where(pattern, '*', d.n_head_kv));
  k.U32("attention.key_length", d.head_dim);
  k.U32("attention.value_length", d.head_dim);
  k.U32("rope.dimension_count", d.head_dim);
  k.U32("feed_forward_length", d.n_ff);
  Mamba2(k, d, 1);
  return d.n_layer;
}

// LFM2: gated short convolutions with grouped-query attention layers in between.
uint32_t Lfm2(Keys& k, BaseDims d) {
  d.n_layer = Layers(d, 16, 30);
  const std::string pattern = Repeat("CCA", d.n_layer);
  k.U32("attention.head_count", d.n_head);
  k.U32s("attention.head_count_kv", Where(pattern, 'A', d.n_head_kv));
  k.U32("feed_forward_length", d.n_ff);
  k.U32("shortconv.l_cache", 3);
  return d.n_layer;
}

uint32_t Mamba2Only(Keys& k, BaseDims d) {
  d.n_layer = Layers(d, 48, 64);
  Mamba2(k, d, 1);
  return d.n_layer;
}

// Gemma 3: interleaved sliding-window (local) and global attention, 5:1 in real models.
uint32_t Gemma3(Keys& k, BaseDims d) {
  d.n_layer = Layers(d, 26, 34);
  if (!IsTiny(d)) {
    d.head_dim = 256;
    d.n_head = d.n_embd <= 1024 ? 4 : 8;
    d.n_head_kv = d.n_embd <= 1024 ? 1 : 4;
  }
  Attention(k, d);
  k.U32("feed_forward_length", d.n_ff);
  k.U32("attention.sliding_window", d.n_swa);
  k.U32("attention.sliding_window_pattern", IsTiny(d) ? 2 : 6);
  k.F32("rope.freq_base", 1000000.0f);
  k.F32("rope.freq_base_swa", 10000.0f);
  return d.n_layer;
}

// gpt-oss: alternating sliding-window and full attention with learned sinks; MoE FFN.
uint32_t GptOss(Keys& k, BaseDims d) {
  d.n_layer = Layers(d, 24, 24);
  if (!IsTiny(d)) {
    d.head_dim = 64;
    d.n_head = d.n_embd / 64;
    d.n_head_kv = d.n_head / 8;
  }
  Attention(k, d);
  k.U32("rope.dimension_count", d.head_dim);
  k.F32("rope.freq_base", 150000.0f);
  k.U32("feed_forward_length", d.n_ff);
  k.U32("attention.sliding_window", IsTiny(d) ? d.n_swa : 128);
  k.U32("attention.sliding_window_pattern", 2);
  k.U32("expert_count", IsTiny(d) ? 4 : 32);
  k.U32("expert_used_count", IsTiny(d) ? 2 : 4);
  k.U32("expert_feed_forward_length", IsTiny(d) ? 64 : (d.n_embd <= 1024 ? 256 : 512));
  return d.n_layer;
}

// Gemma 4 (E2B/E4B): 4 sliding-window layers then 1 global, global heads twice as wide with a
// proportional rope, per-layer token embeddings, and the last `shared` layers keeping no KV of
// their own: they read the KV of the last SWA and the last global layer before them
// (llama.cpp's gemma4 reuse rule), with a double-wide MLP as in E2B.
// S = sliding window, G = global; the pattern must end the non-shared part with "SG".
uint32_t Gemma4(Keys& k, BaseDims d) {
  std::string pattern = "SSSGSSSG";  // tiny: 4 layers with KV, 4 shared
  uint32_t shared = 4;
  if (!IsTiny(d)) {
    pattern = d.n_embd <= 1024 ? Repeat("SSSSG", 35) : Repeat("SSSSSG", 42);  // E2B / E4B
    shared = d.n_embd <= 1024 ? 20 : 18;
    d.head_dim = 256;
    d.n_head = 8;
    d.n_head_kv = d.n_embd <= 1024 ? 1 : 2;
  }
  const uint32_t n_layer = uint32_t(pattern.size());
  const uint32_t global_head = 2 * d.head_dim;
  k.U32("attention.head_count", d.n_head);
  k.U32("attention.head_count_kv", d.n_head_kv);
  k.U32("attention.key_length", global_head);
  k.U32("attention.value_length", global_head);
  k.U32("attention.key_length_swa", d.head_dim);
  k.U32("attention.value_length_swa", d.head_dim);
  k.U32("rope.dimension_count", global_head);
  k.U32("rope.dimension_count_swa", d.head_dim);
  k.F32("rope.freq_base", 1000000.0f);
  k.F32("rope.freq_base_swa", 10000.0f);
  k.U32("attention.sliding_window", d.n_swa);
  k.Bools("attention.sliding_window_pattern", pattern, 'S');
  k.U32("attention.shared_kv_layers", shared);
  k.U32("embedding_length_per_layer_input", IsTiny(d) ? 16 : 256);
  std::vector<uint32_t> n_ff(n_layer, d.n_ff);
  for (uint32_t il = n_layer - shared; il < n_layer; ++il) n_ff[il] = 2 * d.n_ff;
  k.U32s("feed_forward_length", n_ff);
  k.F32("final_logit_softcapping", 30.0f);
  return n_layer;
}

using ArchFn = std::function<uint32_t(Keys&, BaseDims)>;

const std::map<std::string, ArchFn>& ArchTable() {
  static const std::map<std::string, ArchFn> kTable = {
      {"llama", Llama},          {"qwen35", Qwen35},   {"qwen3next", Qwen3Next},
      {"nemotron_h", NemotronH}, {"granitehybrid", GraniteHybrid},
      {"lfm2", Lfm2},            {"mamba2", Mamba2Only}, {"gemma3", Gemma3},
      {"gpt-oss", GptOss},       {"gemma4", Gemma4},
  };
  return kTable;
}

}  // namespace

Status ShapeDims(const std::string& shape, BaseDims* d) {
  *d = BaseDims();
  if (shape == "tiny") return Status::OK();
  if (shape == "small") {
    d->n_embd = 1024;
    d->n_layer = 28;
    d->n_head = 16;
    d->n_head_kv = 4;
    d->head_dim = 64;
    d->n_ff = 4096;
    d->n_vocab = 32768;
    d->n_swa = 512;
    d->weight_type = GGML_TYPE_F16;
    return Status::OK();
  }
  if (shape == "medium") {
    d->n_embd = 2560;
    d->n_layer = 32;
    d->n_head = 20;
    d->n_head_kv = 4;
    d->head_dim = 128;
    d->n_ff = 9216;
    d->n_vocab = 32768;
    d->n_swa = 1024;
    d->weight_type = GGML_TYPE_Q8_0;
    return Status::OK();
  }
  std::string valid;
  for (const std::string& s : TestModelShapes()) valid += (valid.empty() ? "" : ", ") + s;
  return Status::InvalidArgument("unknown test model shape '" + shape + "' (valid: " + valid +
                                 ")");
}

bool HasArchMetadata(const std::string& arch) { return ArchTable().count(arch) > 0; }

std::string NextnArchList() {
  std::string list;
  for (const std::string& a : NextnTestModelArchs()) list += (list.empty() ? "" : ", ") + a;
  return list;
}

Status AddArchMetadata(gguf_context* ctx, const std::string& arch, const BaseDims& dims,
                       uint32_t* n_layer, uint32_t nextn_layers) {
  const auto it = ArchTable().find(arch);
  if (it == ArchTable().end()) {
    std::string valid;
    for (const auto& [name, fn] : ArchTable()) valid += (valid.empty() ? "" : ", ") + name;
    return Status::InvalidArgument("unknown test model arch '" + arch + "' (valid: " + valid +
                                   ")");
  }
  Keys k(ctx, arch);
  gguf_set_val_str(ctx, "general.architecture", arch.c_str());
  k.U32("context_length", dims.n_ctx_train);
  k.U32("embedding_length", dims.n_embd);
  k.U32("vocab_size", dims.n_vocab);
  k.F32("attention.layer_norm_rms_epsilon", 1e-6f);
  if (nextn_layers > 0) {
    const auto& mtp = NextnTestModelArchs();
    if (std::find(mtp.begin(), mtp.end(), arch) == mtp.end()) {
      return Status::InvalidArgument("test model arch '" + arch + "' takes no NextN layers "
                                     "here (MTP heads: " + NextnArchList() + ")");
    }
    // The MTP graphs run one MTP block (llama_model_<arch>::graph_mtp asserts it).
    if (nextn_layers != 1) return Status::InvalidArgument(arch + " takes one NextN layer");
  }
  *n_layer = it->second(k, dims) + nextn_layers;
  k.U32("block_count", *n_layer);
  if (nextn_layers > 0) {
    k.U32("nextn_predict_layers", nextn_layers);
    // Written whole: llama.cpp's writer saves it for the trunk only (test_model_writer.cpp).
    const uint32_t trunk = *n_layer - nextn_layers;
    std::string pattern;
    for (uint32_t il = 0; il < *n_layer; ++il) pattern += il < trunk && (il + 1) % kFullAttentionInterval != 0 ? 'R' : 'A';
    k.Bools("attention.recurrent_layers", pattern, 'R');
  }
  return Status::OK();
}

}  // namespace prefixd::engine::test_model
