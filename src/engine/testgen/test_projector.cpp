// MakeTestProjector: the keys and tensors libmtmd's loader reads for a projector type
// (tools/mtmd/clip.cpp: load_hparams, load_tensors; the graphs in models/siglip.cpp and
// models/qwen3vl.cpp), filled with deterministic random values and written with gguf.h.
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
constexpr uint32_t kMergerFf = 64;  // hidden width of the lfm2 and qwen3vl mergers
constexpr float kEps = 1e-6f;

// What differs between the projector types.
struct ProjectorDesc {
  const char* arch;  // the text model's arch
  const char* type;  // clip.projector_type
  uint32_t image_size;  // gemma3: every image is resized to it; others: the position table's side
  uint32_t patch_size;
  uint32_t n_merge;     // patches merged per side into one token
  bool qwen;            // Qwen-VL ViT: fused QKV, a second (temporal) patch embedding
};

const std::vector<ProjectorDesc>& Descs() {
  static const std::vector<ProjectorDesc> kDescs = {
      {"gemma3", "gemma3", 64, 8, 2, false},           // 8x8 patches, 4x4 tokens
      {"lfm2", "lfm2", 256, 16, 2, false},             // dynamic: 64..256 tokens
      {"qwen35", "qwen3vl_merger", 256, 16, 2, true},  // dynamic: 8.. tokens
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
  // Allocates, fills from `seed` and adds every tensor to `gguf`.
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

// The vision transformer (clip.cpp's build_vit, or the Qwen-VL variant in models/qwen3vl.cpp):
// patch embedding, learned positions, pre-norm blocks, a final norm.
void AddVit(Tensors& t, const ProjectorDesc& d) {
  const int64_t e = kVitEmbd, p = d.patch_size;
  const int64_t n_pos = int64_t(d.image_size / d.patch_size) * (d.image_size / d.patch_size);
  const float residual = 1.0f / std::sqrt(2.0f * kVitBlocks);  // the residual branches' outputs
  t.Add("v.patch_embd.weight", {p, p, 3, e}, Matrix(p * p * 3));
  if (d.qwen) t.Add("v.patch_embd.weight.1", {p, p, 3, e}, Matrix(p * p * 3));
  t.Add("v.patch_embd.bias", {e}, Bias());
  t.Add("v.position_embd.weight", {e, n_pos}, {0.0f, 0.1f});
  for (uint32_t il = 0; il < kVitBlocks; ++il) {
    const std::string blk = "v.blk." + std::to_string(il) + ".";
    t.AddNorm(blk + "ln1", e);
    if (d.qwen) {
      t.AddLinear(blk + "attn_qkv", e, 3 * e);
    } else {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) t.AddLinear(blk + m, e, e);
    }
    t.AddLinear(blk + "attn_out", e, e, residual);
    t.AddNorm(blk + "ln2", e);
    t.AddLinear(blk + "ffn_up", e, kVitFf);
    t.AddLinear(blk + "ffn_down", kVitFf, e, residual);
  }
  t.AddNorm("v.post_ln", e);
}

// The merger from the ViT's patches to tokens of the text model's width `n_text`.
void AddMerger(Tensors& t, const ProjectorDesc& d, int64_t n_text) {
  const int64_t merged = int64_t(kVitEmbd) * d.n_merge * d.n_merge;
  const std::string type = d.type;
  if (type == "gemma3") {
    // avg-pool, rms norm, then x * W: W is [n_text, n_embd] and applied transposed.
    t.Add("mm.soft_emb_norm.weight", {kVitEmbd}, Norm());
    t.Add("mm.input_projection.weight", {n_text, kVitEmbd}, Matrix(kVitEmbd));
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
  const float half[3] = {0.5f, 0.5f, 0.5f};  // pixels to [-1, 1]
  gguf_set_arr_data(ctx, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, half, 3);
  gguf_set_arr_data(ctx, "clip.vision.image_std", GGUF_TYPE_FLOAT32, half, 3);
  // Qwen-VL reads its merge as spatial_merge_size, the others as the projector's scale factor.
  gguf_set_val_u32(ctx, d.qwen ? "clip.vision.spatial_merge_size"
                               : "clip.vision.projector.scale_factor", d.n_merge);
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
