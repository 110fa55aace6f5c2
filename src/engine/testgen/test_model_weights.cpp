// Deterministic random weights for test models.
//
// Values come from a counter-based generator (SplitMix64 of seed, tensor name and element
// index) turned into an approximately normal variate by the Irwin-Hall sum of four 16-bit
// uniforms. Integer arithmetic up to one float multiply makes the bytes the same on every
// platform, and the counter lets large tensors be filled by several threads in any order.
//
// Scales keep activations sane in every architecture: matrices use 1/sqrt(fan_in), the output
// projections of residual branches another 1/sqrt(2 n_layer), norms are 1, Mamba/DeltaNet decay
// rates A are negative with softplus(dt_bias) around 0.13, so the recurrent state neither
// explodes nor forgets at once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "ggml-backend.h"
#include "engine/testgen/test_model_internal.h"

namespace prefixd::engine::test_model {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Approximately N(0, 1), bounded to +-3.46.
float Gaussian(uint64_t key, uint64_t index) {
  const uint64_t r = SplitMix64(key ^ SplitMix64(index));
  const int64_t sum = int64_t(r & 0xffff) + int64_t((r >> 16) & 0xffff) +
                      int64_t((r >> 32) & 0xffff) + int64_t(r >> 48);
  // Sum of 4 U(0, 65536): mean 131070, stdev 65536 * sqrt(4 / 12).
  constexpr float kScale = 1.0f / (65536.0f * 0.57735026919f);
  return float(sum - 131070) * kScale;
}

// How one tensor's values are drawn: value = mean + stdev * z, optionally forced negative.
struct Recipe {
  float mean = 0.0f;
  float stdev = 0.02f;
  bool negative_exp = false;  // value = -exp(mean + stdev * z)
};

bool Has(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

Recipe RecipeFor(const ggml_tensor* t, uint32_t n_layer) {
  const std::string_view name = t->name;
  const float fan_in = float(std::max<int64_t>(t->ne[0], 1));
  Recipe r;
  if (Has(name, "ssm_a")) {
    r.negative_exp = true;  // A = -exp(A_log): a decay rate, always negative
    r.mean = 0.7f;
    r.stdev = 0.5f;
  } else if (Has(name, "ssm_dt")) {
    r.mean = -2.0f;  // softplus(-2) ~ 0.13: the time step
    r.stdev = 0.3f;
  } else if (Has(name, "ssm_d")) {
    r.mean = 1.0f;  // the skip connection D
    r.stdev = 0.1f;
  } else if (Has(name, "rope_freqs")) {
    r.mean = 1.0f;
    r.stdev = 0.0f;
  } else if (Has(name, "norm")) {
    r.mean = 1.0f;
    r.stdev = 0.02f;
  } else if (Has(name, "exp_probs_b")) {
    r.stdev = 0.0f;
  } else if (Has(name, ".bias")) {
    r.stdev = 0.02f;
  } else if (Has(name, "attn_sinks")) {
    r.stdev = 1.0f;
  } else if (Has(name, "token_embd")) {
    r.stdev = 1.0f;
  } else if (name.rfind("output.", 0) == 0) {
    r.stdev = 2.0f / std::sqrt(fan_in);  // logits with a stdev near 2
  } else {
    r.stdev = 1.0f / std::sqrt(fan_in);
    if (Has(name, "attn_output") || Has(name, "ffn_down") || Has(name, "ssm_out") ||
        Has(name, "out_proj")) {
      r.stdev /= std::sqrt(2.0f * float(n_layer));
    }
  }
  return r;
}

void Generate(const Recipe& r, uint64_t key, int64_t begin, int64_t end, float* out) {
  for (int64_t i = begin; i < end; ++i) {
    const float v = r.mean + r.stdev * Gaussian(key, uint64_t(i));
    out[i - begin] = r.negative_exp ? -std::exp(v) : v;
  }
}

// Fills rows [row0, row1) of `t` into `dst` (that many rows of `t`'s type).
void FillRows(const ggml_tensor* t, const Recipe& r, uint64_t key, int64_t row0, int64_t row1,
              void* dst) {
  const int64_t n_per_row = t->ne[0];
  std::vector<float> tmp((row1 - row0) * n_per_row);
  Generate(r, key, row0 * n_per_row, row1 * n_per_row, tmp.data());
  const int64_t n = int64_t(tmp.size());
  switch (t->type) {
    case GGML_TYPE_F32:
      std::memcpy(dst, tmp.data(), n * sizeof(float));
      break;
    case GGML_TYPE_F16:
      ggml_fp32_to_fp16_row(tmp.data(), static_cast<ggml_fp16_t*>(dst), n);
      break;
    default:
      ggml_quantize_chunk(t->type, tmp.data(), dst, 0, row1 - row0, n_per_row, nullptr);
      break;
  }
}

bool SupportedType(ggml_type type) {
  return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_Q8_0;
}

// Fills `tensor` by `recipe` with values keyed by `seed` and `name` (the tensor's own, or the
// tensor whose values it must repeat).
void Fill(ggml_tensor* tensor, const Recipe& recipe, uint64_t seed, std::string_view name) {
  const uint64_t key = SplitMix64(seed) ^ Fnv1a(name);
  const int64_t n_rows = ggml_nrows(tensor);
  const size_t row_size = ggml_row_size(tensor->type, tensor->ne[0]);
  std::vector<uint8_t> data(ggml_nbytes(tensor));

  // Threads fill disjoint row ranges; the values do not depend on the split.
  const int64_t n_elements = ggml_nelements(tensor);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t n_threads = std::min<int64_t>({int64_t(hw), 8, n_rows,
                                               std::max<int64_t>(1, n_elements >> 20)});
  std::vector<std::thread> threads;
  const int64_t per = (n_rows + n_threads - 1) / n_threads;
  for (int64_t t = 0; t < n_threads; ++t) {
    const int64_t r0 = t * per;
    const int64_t r1 = std::min(n_rows, r0 + per);
    if (r0 >= r1) break;
    threads.emplace_back(FillRows, tensor, std::cref(recipe), key, r0, r1,
                         data.data() + r0 * row_size);
  }
  for (std::thread& th : threads) th.join();
  ggml_backend_tensor_set(tensor, data.data(), 0, data.size());
}

// The MTP head's input projection of a predictable model: [I 0], the token's half of
// (enorm(token embedding), hnorm(hidden)) passed through, the hidden state's dropped.
void FillPassThrough(ggml_tensor* t) {
  std::vector<float> v(size_t(ggml_nelements(t)), 0.0f);
  const int64_t n_in = t->ne[0];
  for (int64_t j = 0; j < t->ne[1] && j < n_in; ++j) v[size_t(j * n_in + j)] = 1.0f;
  std::vector<uint8_t> data(ggml_nbytes(t));
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(data.data(), v.data(), data.size());
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(v.data(), reinterpret_cast<ggml_fp16_t*>(data.data()), int64_t(v.size()));
  } else {
    ggml_quantize_chunk(t->type, v.data(), data.data(), 0, t->ne[1], n_in, nullptr);
  }
  ggml_backend_tensor_set(t, data.data(), 0, data.size());
}

// TestModelSpec::predictable: true when `t` was filled here.
bool FillPredictable(ggml_tensor* t, const WeightInit& init) {
  const std::string_view name = t->name;
  Recipe r = RecipeFor(t, init.n_layer);
  if (Has(name, "nextn.eh_proj")) {
    FillPassThrough(t);
    return true;
  }
  // The head's own LM head and embeddings, where llama.cpp made them, are the trunk's.
  std::string_view as = name;
  if (Has(name, "nextn.shared_head_head")) as = "output.weight";
  if (Has(name, "nextn.embed_tokens")) as = "token_embd.weight";
  if (as != name) {
    ggml_tensor same = *t;
    ggml_set_name(&same, std::string(as).c_str());
    r = RecipeFor(&same, init.n_layer);
  } else if (Has(name, "attn_output") || Has(name, "ffn_down") || Has(name, "ssm_out") ||
             Has(name, "out_proj")) {
    r = Recipe{0.0f, 0.0f, false};  // the residual branches write nothing
  } else if (Has(name, "norm")) {
    r = Recipe{1.0f, 0.0f, false};
  } else {
    return false;
  }
  Fill(t, r, init.seed, as);
  return true;
}

}  // namespace

void FillTensor(ggml_tensor* tensor, void* weight_init) {
  auto* init = static_cast<WeightInit*>(weight_init);
  if (!SupportedType(tensor->type)) {
    if (init->error.empty()) {
      init->error = std::string("tensor ") + tensor->name + " has unsupported type " +
                    ggml_type_name(tensor->type);
    }
    return;
  }
  if (init->predictable && FillPredictable(tensor, *init)) return;
  Fill(tensor, RecipeFor(tensor, init->n_layer), init->seed, tensor->name);
}

bool FillNormal(ggml_tensor* tensor, uint64_t seed, float stdev) {
  if (!SupportedType(tensor->type)) return false;
  Recipe recipe;
  recipe.stdev = stdev;
  Fill(tensor, recipe, seed, tensor->name);
  return true;
}

void AddWeightTypes(gguf_context* ctx, uint32_t n_layer, ggml_type type) {
  if (type == GGML_TYPE_F32) return;
  static const char* const kLayerMatrices[] = {
      "attn_q",        "attn_k",        "attn_v",         "attn_qkv",      "attn_output",
      "attn_gate",     "ffn_gate",      "ffn_up",         "ffn_down",      "ffn_gate_exps",
      "ffn_up_exps",   "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp",  "ffn_down_shexp",
      "ssm_in",        "ssm_out",       "ssm_alpha",      "ssm_beta",      "ssm_ba",
      "shortconv.in_proj", "shortconv.out_proj",
  };
  std::vector<std::string> names = {"token_embd.weight", "output.weight",
                                    "per_layer_token_embd.weight"};
  for (uint32_t il = 0; il < n_layer; ++il) {
    for (const char* m : kLayerMatrices) {
      names.push_back("blk." + std::to_string(il) + "." + m + ".weight");
    }
  }
  for (const std::string& name : names) {
    ggml_tensor t;
    std::memset(&t, 0, sizeof(t));
    t.type = type;
    ggml_set_name(&t, name.c_str());
    gguf_add_tensor(ctx, &t);
  }
}

}  // namespace prefixd::engine::test_model
