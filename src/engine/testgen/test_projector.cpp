// MakeTestProjector: the keys and tensors libmtmd's loader reads for a projector type
// (tools/mtmd/clip.cpp: load_hparams, load_tensors; the graphs in models/siglip.cpp,
// models/qwen3vl.cpp and models/gemma4v.cpp), filled with deterministic random values and
// written with gguf.h.
//
// Tensor shapes are ggml's (ne0 first): a matrix applied to x of width `in` is [in, out].
#include "engine/testgen/test_projector.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/testgen/test_model_internal.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

namespace prefixd::engine {
namespace {

using test_model::GgufPtr;

// The vision transformer every test projector starts with.
constexpr uint32_t kVitEmbd = 32;
constexpr uint32_t kVitFf = 64;
constexpr uint32_t kVitBlocks = 2;
constexpr uint32_t kVitHeads = 2;
constexpr uint32_t kMergerFf = 64;           // hidden width of the lfm2 and qwen3vl mergers
constexpr uint32_t kGemma4Positions = 4096;  // rows of each of gemma4v's x and y position tables
constexpr float kEps = 1e-6f;

// The vision transformers of the projector types.
enum class Vit {
  kSiglip,  // clip.cpp's build_vit: layer norms, separate Q/K/V with biases, GELU MLP
  kQwenVl,  // models/qwen3vl.cpp: fused QKV, a second (temporal) patch embedding, M-RoPE
  kGemma4,  // models/gemma4v.cpp: RMS norms, Q/K norms, post norms, gated GELU, x/y tables
};

// What differs between the projector types.
struct ProjectorDesc {
  const char* arch;  // the text model's arch
  const char* type;  // clip.projector_type
  uint32_t image_size;  // gemma3: every image is resized to it; lfm2, qwen35: the position
                        // table's side; gemma4: unused (libmtmd requires it)
  uint32_t patch_size;
  uint32_t n_merge;     // patches merged per side into one token
  Vit vit;
};

const std::vector<ProjectorDesc>& Descs() {
  static const std::vector<ProjectorDesc> kDescs = {
      {"gemma3", "gemma3", 64, 8, 2, Vit::kSiglip},           // 8x8 patches, 4x4 tokens
      {"lfm2", "lfm2", 256, 16, 2, Vit::kSiglip},             // dynamic: 64..256 tokens
      {"qwen35", "qwen3vl_merger", 256, 16, 2, Vit::kQwenVl},  // dynamic: 8..4096 tokens
      {"gemma4", "gemma4v", 224, 16, 3, Vit::kGemma4},        // dynamic: 70..1120 tokens
  };
  return kDescs;
}

const ProjectorDesc* FindDesc(const std::string& arch) {
  for (const ProjectorDesc& d : Descs()) {
    if (arch == d.arch) return &d;
  }
  return nullptr;
}

// How a tensor's values are drawn: mean + stdev * N(0, 1).
struct Init {
  float mean = 0.0f;
  float stdev = 0.02f;
};

Init Norm() { return {1.0f, 0.02f}; }
Init Bias() { return {0.0f, 0.02f}; }
Init Matrix(int64_t fan_in, float scale = 1.0f) {
  return {0.0f, scale / std::sqrt(float(fan_in))};
}

struct GgmlFree {
  void operator()(ggml_context* c) const { ggml_free(c); }
};
struct BufferFree {
  void operator()(ggml_backend_buffer_t b) const { ggml_backend_buffer_free(b); }
};

// The projector's tensors, declared first and allocated together on the CPU.
class Tensors {
 public:
  Tensors() {
    ggml_init_params params = {/*mem_size=*/256 * ggml_tensor_overhead(), nullptr,
                               /*no_alloc=*/true};
    ctx_.reset(ggml_init(params));
  }
  void Add(const std::string& name, std::vector<int64_t> ne, Init init) {
    ne.resize(4, 1);
    ggml_tensor* t = ggml_new_tensor_4d(ctx_.get(), GGML_TYPE_F32, ne[0], ne[1], ne[2], ne[3]);
    ggml_set_name(t, name.c_str());
    list_.push_back({t, init});
  }
  // A norm's weight and bias.
  void AddNorm(const std::string& prefix, int64_t n) {
    Add(prefix + ".weight", {n}, Norm());
    Add(prefix + ".bias", {n}, Bias());
  }
  // A linear layer from `in` to `out` with a bias.
  void AddLinear(const std::string& prefix, int64_t in, int64_t out, float scale = 1.0f) {
    Add(prefix + ".weight", {in, out}, Matrix(in, scale));
    Add(prefix + ".bias", {out}, Bias());
  }
  // Allocates, fills from `seed` and adds every tensor to `gguf`, which reads their data from
  // here when it is written: REQUIRES that this object outlives the write.
  Status FillInto(gguf_context* gguf, uint64_t seed) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu == nullptr) return Status::Internal("no CPU backend to build the projector on");
    buffer_.reset(
        ggml_backend_alloc_ctx_tensors_from_buft(ctx_.get(), ggml_backend_dev_buffer_type(cpu)));
    if (!buffer_) return Status::Internal("cannot allocate the projector's tensors");
    for (const auto& [t, init] : list_) {
      if (!test_model::FillNormal(t, seed, init.stdev)) return Status::Internal("bad type");
      float* v = static_cast<float*>(t->data);  // a CPU buffer: host memory
      if (init.mean != 0.0f) {
        for (int64_t i = 0; i < ggml_nelements(t); ++i) v[i] += init.mean;
      }
      gguf_add_tensor(gguf, t);
    }
    return Status::OK();
  }

 private:
  struct Entry {
    ggml_tensor* tensor;
    Init init;
  };
  std::unique_ptr<ggml_context, GgmlFree> ctx_;
  std::unique_ptr<ggml_backend_buffer, BufferFree> buffer_;
  std::vector<Entry> list_;
};

const float kResidual = 1.0f / std::sqrt(2.0f * kVitBlocks);  // the residual branches' outputs

// clip.cpp's build_vit as siglip.cpp and qwen3vl.cpp run it: patch embedding with a bias,
// learned positions, pre-norm blocks (layer norms), a final norm.
void AddSiglipVit(Tensors& t, const ProjectorDesc& d) {
  const int64_t e = kVitEmbd, p = d.patch_size;
  const int64_t n_pos = int64_t(d.image_size / d.patch_size) * (d.image_size / d.patch_size);
  const bool qwen = d.vit == Vit::kQwenVl;
  t.Add("v.patch_embd.weight", {p, p, 3, e}, Matrix(p * p * 3));
  if (qwen) t.Add("v.patch_embd.weight.1", {p, p, 3, e}, Matrix(p * p * 3));
  t.Add("v.patch_embd.bias", {e}, Bias());
  t.Add("v.position_embd.weight", {e, n_pos}, {0.0f, 0.1f});
  for (uint32_t il = 0; il < kVitBlocks; ++il) {
    const std::string blk = "v.blk." + std::to_string(il) + ".";
    t.AddNorm(blk + "ln1", e);
    if (qwen) {
      t.AddLinear(blk + "attn_qkv", e, 3 * e);
    } else {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) t.AddLinear(blk + m, e, e);
    }
    t.AddLinear(blk + "attn_out", e, e, kResidual);
    t.AddNorm(blk + "ln2", e);
    t.AddLinear(blk + "ffn_up", e, kVitFf);
    t.AddLinear(blk + "ffn_down", kVitFf, e, kResidual);
  }
  t.AddNorm("v.post_ln", e);
}

// gemma4v.cpp: a patch embedding without bias, an x and a y position table (rows looked up by
// the patch's column and row), blocks with RMS norms (weights only), per-head Q/K norms, norms
// after attention and MLP, and a gated GELU MLP; no final norm.
void AddGemma4Vit(Tensors& t, const ProjectorDesc& d) {
  const int64_t e = kVitEmbd, p = d.patch_size, d_head = kVitEmbd / kVitHeads;
  t.Add("v.patch_embd.weight", {p, p, 3, e}, Matrix(p * p * 3));
  t.Add("v.position_embd.weight", {e, kGemma4Positions, 2}, {0.0f, 0.1f});
  for (uint32_t il = 0; il < kVitBlocks; ++il) {
    const std::string blk = "v.blk." + std::to_string(il) + ".";
    for (const char* norm : {"ln1", "attn_post_norm", "ln2", "ffn_post_norm"}) {
      t.Add(blk + norm + ".weight", {e}, Norm());
    }
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
      t.Add(blk + m + ".weight", {e, e}, Matrix(e));
    }
    t.Add(blk + "attn_q_norm.weight", {d_head}, Norm());
    t.Add(blk + "attn_k_norm.weight", {d_head}, Norm());
    t.Add(blk + "attn_out.weight", {e, e}, Matrix(e, kResidual));
    t.Add(blk + "ffn_gate.weight", {e, kVitFf}, Matrix(e));
    t.Add(blk + "ffn_up.weight", {e, kVitFf}, Matrix(e));
    t.Add(blk + "ffn_down.weight", {kVitFf, e}, Matrix(kVitFf, kResidual));
  }
}

void AddVit(Tensors& t, const ProjectorDesc& d) {
  if (d.vit == Vit::kGemma4) {
    AddGemma4Vit(t, d);
  } else {
    AddSiglipVit(t, d);
  }
}

// The merger from the ViT's patches to tokens of the text model's width `n_text`.
void AddMerger(Tensors& t, const ProjectorDesc& d, int64_t n_text) {
  const int64_t merged = int64_t(kVitEmbd) * d.n_merge * d.n_merge;
  const std::string type = d.type;
  if (type == "gemma3") {
    // avg-pool, rms norm, then x * W: W is [n_text, n_embd] and applied transposed.
    t.Add("mm.soft_emb_norm.weight", {kVitEmbd}, Norm());
    t.Add("mm.input_projection.weight", {n_text, kVitEmbd}, Matrix(kVitEmbd));
  } else if (type == "gemma4v") {
    // avg-pool, scale by sqrt(n_embd), rms norm, then W x.
    t.Add("mm.input_projection.weight", {kVitEmbd, n_text}, Matrix(kVitEmbd));
  } else if (type == "lfm2") {
    // pixel unshuffle, layer norm, GELU MLP.
    t.AddNorm("mm.input_norm", merged);
    t.AddLinear("mm.1", merged, kMergerFf);
    t.AddLinear("mm.2", kMergerFf, n_text);
  } else {
    // qwen3vl_merger: 2x2 patches side by side, GELU MLP (mm.0, mm.2).
    t.AddLinear("mm.0", merged, kMergerFf);
    t.AddLinear("mm.2", kMergerFf, n_text);
  }
}

void AddKeys(gguf_context* ctx, const ProjectorDesc& d, uint32_t n_text,
             const TestModelSpec& spec) {
  const std::string name = "prefixd-test-" + spec.arch + "-" + spec.shape + "-mmproj";
  const std::string desc = "prefixd test projector: random weights (seed " +
                           std::to_string(spec.seed) + "), not trained";
  gguf_set_val_str(ctx, "general.architecture", "clip");
  gguf_set_val_str(ctx, "general.name", name.c_str());
  gguf_set_val_str(ctx, "general.description", desc.c_str());
  gguf_set_val_bool(ctx, "clip.has_vision_encoder", true);
  gguf_set_val_str(ctx, "clip.projector_type", d.type);
  gguf_set_val_bool(ctx, "clip.use_gelu", true);
  gguf_set_val_u32(ctx, "clip.vision.embedding_length", kVitEmbd);
  gguf_set_val_u32(ctx, "clip.vision.feed_forward_length", kVitFf);
  gguf_set_val_u32(ctx, "clip.vision.block_count", kVitBlocks);
  gguf_set_val_u32(ctx, "clip.vision.projection_dim", n_text);
  gguf_set_val_u32(ctx, "clip.vision.attention.head_count", kVitHeads);
  gguf_set_val_f32(ctx, "clip.vision.attention.layer_norm_epsilon", kEps);
  gguf_set_val_u32(ctx, "clip.vision.image_size", d.image_size);
  gguf_set_val_u32(ctx, "clip.vision.patch_size", d.patch_size);
  // Pixels to [-1, 1]: by the mean and std, or in gemma4v's graph, which expects [0, 1].
  const bool in_graph = d.vit == Vit::kGemma4;
  const float mean[3] = {0.5f, 0.5f, 0.5f}, half[3] = {0.5f, 0.5f, 0.5f};
  const float zero[3] = {0.0f, 0.0f, 0.0f}, one[3] = {1.0f, 1.0f, 1.0f};
  gguf_set_arr_data(ctx, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, in_graph ? zero : mean, 3);
  gguf_set_arr_data(ctx, "clip.vision.image_std", GGUF_TYPE_FLOAT32, in_graph ? one : half, 3);
  // Qwen-VL reads its merge as spatial_merge_size, the others as the projector's scale factor.
  gguf_set_val_u32(ctx, d.vit == Vit::kQwenVl ? "clip.vision.spatial_merge_size"
                                              : "clip.vision.projector.scale_factor",
                   d.n_merge);
}

// The text model's embedding width for the spec's arch and shape, as MakeTestModel writes it.
Result<uint32_t> TextWidth(const TestModelSpec& spec) {
  test_model::BaseDims dims;
  PREFIXD_RETURN_IF_ERROR(test_model::ShapeDims(spec.shape, &dims));
  GgufPtr meta(gguf_init_empty());
  uint32_t n_layer = 0;
  PREFIXD_RETURN_IF_ERROR(test_model::AddArchMetadata(meta.get(), spec.arch, dims, &n_layer));
  const int64_t key = gguf_find_key(meta.get(), (spec.arch + ".embedding_length").c_str());
  if (key < 0) return Status::Internal("no embedding_length for " + spec.arch);
  return gguf_get_val_u32(meta.get(), key);
}

// Writes `ctx` to `path` through `path`.tmp: written, synced, renamed, folder synced.
Status WriteAtomically(const gguf_context* ctx, const std::string& path) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::IOError("cannot create " + tmp);
  const bool written = gguf_write_to_file_ptr(ctx, f, /*only_meta=*/false);
  const bool synced = written && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!synced || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IOError("cannot write " + path);
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  return Status::OK();
}

std::string ProjectorArchList() {
  std::string list;
  for (const std::string& a : ProjectorTestModelArchs()) list += (list.empty() ? "" : ", ") + a;
  return list;
}

}  // namespace

const std::vector<std::string>& ProjectorTestModelArchs() {
  static const std::vector<std::string> kArchs = [] {
    std::vector<std::string> archs;
    for (const ProjectorDesc& d : Descs()) archs.push_back(d.arch);
    return archs;
  }();
  return kArchs;
}

Status MakeTestProjector(const TestModelSpec& spec, const std::string& out_path) {
  const ProjectorDesc* desc = FindDesc(spec.arch);
  if (desc == nullptr) {
    return Status::InvalidArgument("test model arch '" + spec.arch + "' has no image projector "
                                   "(--mmproj: " + ProjectorArchList() + ")");
  }
  PREFIXD_ASSIGN_OR_RETURN(const uint32_t n_text, TextWidth(spec));
  EnsureBackendInitialized();  // the CPU device the tensors are allocated on
  GgufPtr gguf(gguf_init_empty());
  AddKeys(gguf.get(), *desc, n_text, spec);
  Tensors tensors;
  AddVit(tensors, *desc);
  AddMerger(tensors, *desc, n_text);
  PREFIXD_RETURN_IF_ERROR(tensors.FillInto(gguf.get(), spec.seed));
  return WriteAtomically(gguf.get(), out_path);
}

}  // namespace prefixd::engine
