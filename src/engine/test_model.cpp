// MakeTestModel: metadata (test_model_arch.cpp, test_model_tokenizer.cpp) -> llama.cpp builds
// the model with random weights (test_model_weights.cpp) -> llama.cpp writes the GGUF -> the
// keys its writer drops (the chat template) are added back -> rename into place.
#include "engine/test_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/test_model_internal.h"
#include "llama.h"

namespace prefixd::engine {
namespace {

using test_model::BaseDims;
using test_model::GgufPtr;

struct ModelFree {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
using ModelPtr = std::unique_ptr<llama_model, ModelFree>;

bool SilentProgress(float, void*) { return true; }

Result<GgufPtr> BuildMetadata(const TestModelSpec& spec, const BaseDims& dims,
                              uint32_t* n_layer) {
  GgufPtr meta(gguf_init_empty());
  PREFIXD_RETURN_IF_ERROR(test_model::AddArchMetadata(meta.get(), spec.arch, dims, n_layer));
  const std::string name = "prefixd-test-" + spec.arch + "-" + spec.shape;
  gguf_set_val_str(meta.get(), "general.name", name.c_str());
  test_model::AddTokenizer(meta.get(), dims.n_vocab);
  test_model::AddWeightTypes(meta.get(), *n_layer, dims.weight_type);
  return meta;
}

// How the tensors of a model described by its metadata get their values.
struct Weights {
  llama_model_set_tensor_data_t fill = nullptr;
  void* userdata = nullptr;
  const std::string* error = nullptr;  // set by `fill` when it cannot fill a tensor
};

// Builds the model in memory with llama.cpp, on the CPU, without repacked weight buffers (so
// the writer can read every tensor back).
Result<ModelPtr> BuildModel(gguf_context* meta, const Weights& weights) {
  EnsureBackendInitialized();  // once per process; routes llama.cpp logs to ours
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  params.use_extra_bufts = false;
  params.progress_callback = SilentProgress;
  ModelPtr model(llama_model_init_from_user(meta, weights.fill, weights.userdata, params));
  if (!model) return Status::Internal("llama.cpp rejected the test model metadata");
  if (!weights.error->empty()) return Status::Internal(*weights.error);
  return model;
}

Status SyncAndClose(FILE* f, const std::string& path) {
  const bool ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  return ok && closed ? Status::OK() : Status::IOError("cannot write " + path);
}

// Copies `src` from byte `offset` to the end onto the end of `dst`.
Status AppendTail(const std::string& src, size_t offset, FILE* dst) {
  FILE* in = std::fopen(src.c_str(), "rb");
  if (!in) return Status::IOError("cannot open " + src);
  std::unique_ptr<FILE, int (*)(FILE*)> guard(in, std::fclose);
  if (std::fseek(in, long(offset), SEEK_SET) != 0) return Status::IOError("cannot seek " + src);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
    if (std::fwrite(buf.data(), 1, n, dst) != n) return Status::IOError("short write");
  }
  return std::ferror(in) ? Status::IOError("cannot read " + src) : Status::OK();
}

// llama.cpp's writer keeps only the keys it knows; this rewrites `saved` into `out_tmp` with
// the chat template and the description `desc` added (same tensors, same data bytes).
Status AddDroppedKeys(const std::string& saved, const std::string& out_tmp,
                      const std::string& desc) {
  gguf_init_params gp = {/*no_alloc=*/true, /*ctx=*/nullptr};
  GgufPtr ctx(gguf_init_from_file(saved.c_str(), gp));
  if (!ctx) return Status::Corruption("cannot read back " + saved);
  gguf_set_val_str(ctx.get(), "tokenizer.chat_template", test_model::ChatTemplate().c_str());
  gguf_set_val_str(ctx.get(), "general.description", desc.c_str());
  FILE* out = std::fopen(out_tmp.c_str(), "wb");
  if (!out) return Status::IOError("cannot create " + out_tmp);
  if (!gguf_write_to_file_ptr(ctx.get(), out, /*only_meta=*/true)) {
    std::fclose(out);
    return Status::IOError("cannot write metadata to " + out_tmp);
  }
  Status st = AppendTail(saved, gguf_get_data_offset(ctx.get()), out);
  Status closed = SyncAndClose(out, out_tmp);
  return st.ok() ? closed : st;
}

Status Publish(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("cannot rename " + tmp + " to " + path);
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

// Builds the model from `meta` and `weights`, writes it and publishes it at `out_path`.
Status WriteModel(gguf_context* meta, const Weights& weights, const std::string& desc,
                  const std::string& out_path) {
  const std::string saved = out_path + ".tmp-saved";
  const std::string out_tmp = out_path + ".tmp";
  {
    PREFIXD_ASSIGN_OR_RETURN(ModelPtr model, BuildModel(meta, weights));
    llama_model_save_to_file(model.get(), saved.c_str());
  }
  Status st = AddDroppedKeys(saved, out_tmp, desc);
  std::remove(saved.c_str());
  if (!st.ok()) {
    std::remove(out_tmp.c_str());
    return st;
  }
  return Publish(out_tmp, out_path);
}

std::string Seed(uint64_t seed) { return "seed " + std::to_string(seed); }

// An arch prefixd describes itself (test_model_arch.cpp), with prefixd's weights.
Status MakeOwn(const TestModelSpec& spec, const std::string& out_path) {
  BaseDims dims;
  PREFIXD_RETURN_IF_ERROR(test_model::ShapeDims(spec.shape, &dims));
  uint32_t n_layer = 0;
  PREFIXD_ASSIGN_OR_RETURN(GgufPtr meta, BuildMetadata(spec, dims, &n_layer));
  test_model::WeightInit init;
  init.seed = spec.seed;
  init.n_layer = n_layer;
  const Weights weights = {test_model::FillTensor, &init, &init.error};
  const std::string desc = "prefixd test model: random weights (" + Seed(spec.seed) +
                           "), not trained";
  return WriteModel(meta.get(), weights, desc, out_path);
}

std::string ValidArchs() {
  std::string valid;
  for (const auto* list : {&TestModelArchs(), &ExtraTestModelArchs()}) {
    for (const std::string& a : *list) valid += (valid.empty() ? "" : ", ") + a;
  }
  return valid;
}

// An arch of llama.cpp's generator, rebuilt with prefixd's tokenizer (test_model_upstream.cpp).
Status MakeFromUpstream(const TestModelSpec& spec, const std::string& out_path) {
  if (spec.shape != "tiny") {
    return Status::InvalidArgument("test model arch '" + spec.arch +
                                   "' comes from llama.cpp's generator, which has one shape: tiny");
  }
  auto upstream = test_model::UpstreamModel::Generate(spec.arch, spec.seed, out_path);
  if (!upstream.ok() && upstream.status().code() == Status::Code::kInvalidArgument) {
    return Status::InvalidArgument("unknown test model arch '" + spec.arch + "' (valid: " +
                                   ValidArchs() + ", or another arch that llama.cpp's "
                                   "test-llama-archs writes)");
  }
  PREFIXD_RETURN_IF_ERROR(upstream.status());
  test_model::UpstreamModel& model = *upstream.value();
  BaseDims dims;
  const GgufPtr meta = model.BuildMetadata(dims.n_vocab, dims.n_ctx_train,
                                           "prefixd-test-" + spec.arch + "-tiny");
  const Weights weights = {test_model::UpstreamModel::FillTensor, &model, &model.error()};
  const std::string desc = "prefixd test model: llama.cpp test-llama-archs " + spec.arch + "-" +
                           model.variant() + " (" + Seed(spec.seed) +
                           ") with prefixd's tokenizer; random weights, not trained";
  return WriteModel(meta.get(), weights, desc, out_path);
}

}  // namespace

const std::vector<std::string>& TestModelArchs() {
  static const std::vector<std::string> kArchs = {
      "llama", "qwen35", "qwen3next", "nemotron_h", "granitehybrid",
      "lfm2",  "mamba2", "gemma3",    "gpt-oss",
  };
  return kArchs;
}

const std::vector<std::string>& ExtraTestModelArchs() {
  static const std::vector<std::string> kArchs = {
      "gemma4",   "qwen4exp",    "deepseek4", "deepseek2", "glm-dsa",    "qwen35moe",
      "nemotron_h_moe", "kimi-linear", "jamba", "falcon-h1", "minimax-m3",
  };
  return kArchs;
}

const std::vector<std::string>& TestModelShapes() {
  static const std::vector<std::string> kShapes = {"tiny", "small", "medium"};
  return kShapes;
}

Status MakeTestModel(const TestModelSpec& spec, const std::string& out_path) {
  const Status st = test_model::HasArchMetadata(spec.arch) ? MakeOwn(spec, out_path)
                                                           : MakeFromUpstream(spec, out_path);
  if (st.ok() || st.code() == Status::Code::kInvalidArgument) return st;
  return st.WithContext("make test model " + spec.arch);
}

}  // namespace prefixd::engine
