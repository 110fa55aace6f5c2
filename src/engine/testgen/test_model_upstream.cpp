// Test models of the archs that prefixd does not describe itself: the pinned llama.cpp's own
// generator (tests/test-llama-archs.cpp, run as `test-llama-archs -a ^ARCH$ -s SEED -o DIR/`)
// knows the hyper-parameters and tensors of ~127 archs but writes a "test" tokenizer without
// chat tokens. Its model is read back and rebuilt with prefixd's tokenizer: every
// hyper-parameter is kept except those sized by the vocabulary, every tensor keeps its bytes
// except those llama.cpp now sizes from the new vocabulary (token_embd, output,
// per-layer token embeddings), which get fresh seeded values at the generator's scale.
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "engine/testgen/test_model_internal.h"
#include "ggml-backend.h"

extern char** environ;

namespace prefixd::engine::test_model {
namespace {

namespace fs = std::filesystem;

// Where the generator is: $PREFIXD_TEST_LLAMA_ARCHS, else <llama build dir>/bin/test-llama-archs.
std::string GeneratorPath() {
  const char* env = std::getenv("PREFIXD_TEST_LLAMA_ARCHS");
  if (env != nullptr && *env != '\0') return env;
  return PREFIXD_TEST_LLAMA_ARCHS;
}

// Arch names are lowercase letters, digits, '-' and '_': safe inside the generator's regex.
bool ValidArchName(const std::string& arch) {
  if (arch.empty()) return false;
  for (char c : arch) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!(std::islower(u) || std::isdigit(u) || c == '-' || c == '_')) return false;
  }
  return true;
}

std::string LogTail(const std::string& log_path) {
  std::ifstream in(log_path, std::ios::binary);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return log.size() > 600 ? log.substr(log.size() - 600) : log;
}

// Runs `argv` with stdout and stderr sent to `log_path`; returns its exit status or -1.
int Spawn(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A folder removed with everything in it when it goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = prefix + ".gen-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The generator's default: every tensor is N(0, 0.1) (Mamba's A is -|x|).
constexpr float kGeneratorStdev = 0.1f;

// Root mean square of a F32 or F16 tensor's values (the generator draws N(0, stdev)).
float Rms(const ggml_tensor* t) {
  const int64_t n = ggml_nelements(t);
  std::vector<float> values(n);
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(values.data(), t->data, n * sizeof(float));
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp16_to_fp32_row(static_cast<const ggml_fp16_t*>(t->data), values.data(), n);
  } else {
    return kGeneratorStdev;
  }
  double sum = 0.0;
  for (float v : values) sum += double(v) * double(v);
  return n > 0 ? float(std::sqrt(sum / double(n))) : kGeneratorStdev;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Removes "tokenizer.*" and "general.name" from `ctx`.
void RemoveTokenizerKeys(gguf_context* ctx) {
  for (int64_t i = gguf_get_n_kv(ctx) - 1; i >= 0; --i) {
    const std::string key = gguf_get_key(ctx, i);
    if (StartsWith(key, "tokenizer.") || key == "general.name") gguf_remove_key(ctx, key.c_str());
  }
}

// qwen4exp's per-layer n-gram embeddings hash into heads of `head_vocab_sizes` rows each
// (the generator's n_vocab), stacked at `head_offsets`, and pad with `eos_token_id`.
void ResizePleHeads(gguf_context* ctx, const std::string& arch, uint32_t n_vocab,
                    uint32_t eos) {
  const std::string sizes_key = arch + ".ple.head_vocab_sizes";
  const int64_t sizes_id = gguf_find_key(ctx, sizes_key.c_str());
  if (sizes_id < 0) return;
  const size_t n_heads = gguf_get_arr_n(ctx, sizes_id);
  std::vector<uint64_t> sizes(n_heads, n_vocab), offsets(n_heads);
  for (size_t h = 0; h < n_heads; ++h) offsets[h] = uint64_t(h) * n_vocab;
  gguf_set_arr_data(ctx, sizes_key.c_str(), GGUF_TYPE_UINT64, sizes.data(), n_heads);
  gguf_set_arr_data(ctx, (arch + ".ple.head_offsets").c_str(), GGUF_TYPE_UINT64, offsets.data(),
                    n_heads);
  gguf_set_val_u32(ctx, (arch + ".ple.eos_token_id").c_str(), eos);
}

// Declares every tensor of `src` that is not F32 with its type (llama.cpp makes the rest F32).
void DeclareTypes(gguf_context* ctx, const gguf_context* src) {
  for (int64_t i = 0; i < gguf_get_n_tensors(src); ++i) {
    if (gguf_get_tensor_type(src, i) == GGML_TYPE_F32) continue;
    ggml_tensor decl;
    std::memset(&decl, 0, sizeof(decl));
    decl.type = gguf_get_tensor_type(src, i);
    ggml_set_name(&decl, gguf_get_tensor_name(src, i));
    gguf_add_tensor(ctx, &decl);
  }
}

// Bytes of one array element of a scalar gguf type (gguf.h keeps gguf_type_size private).
size_t ScalarWidth(gguf_type type) {
  switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 4;
  }
}

// `n` NextN (MTP) blocks after the generator's trunk: "block_count" counts them, and every
// per-layer array gets an entry for each, its last layer's again, but "recurrent_layers", where
// a NextN block is an attention layer (0).
void AddNextnLayers(gguf_context* meta, const std::string& arch, uint32_t n) {
  const std::string count_key = arch + ".block_count";
  const uint32_t trunk = gguf_get_val_u32(meta, gguf_find_key(meta, count_key.c_str()));
  for (int64_t i = 0; i < gguf_get_n_kv(meta); ++i) {
    if (gguf_get_kv_type(meta, i) != GGUF_TYPE_ARRAY || gguf_get_arr_n(meta, i) != trunk) continue;
    const gguf_type type = gguf_get_arr_type(meta, i);
    if (type == GGUF_TYPE_STRING || type == GGUF_TYPE_ARRAY) continue;
    const std::string key = gguf_get_key(meta, i);
    const size_t width = ScalarWidth(type);
    const auto* data = static_cast<const uint8_t*>(gguf_get_arr_data(meta, i));
    std::vector<uint8_t> longer(data, data + width * trunk);
    const bool recurrent = key == arch + ".attention.recurrent_layers";
    for (uint32_t k = 0; k < n; ++k) {
      const size_t at = longer.size();
      longer.resize(at + width, 0);
      if (!recurrent) std::memcpy(longer.data() + at, data + width * (trunk - 1), width);
    }
    gguf_set_arr_data(meta, key.c_str(), type, longer.data(), trunk + n);
  }
  gguf_set_val_u32(meta, count_key.c_str(), trunk + n);
  gguf_set_val_u32(meta, (arch + ".nextn_predict_layers").c_str(), n);
}

}  // namespace

Result<std::unique_ptr<UpstreamModel>> UpstreamModel::Generate(const std::string& arch,
                                                               uint64_t seed,
                                                               const std::string& out_path) {
  if (!ValidArchName(arch)) {
    return Status::InvalidArgument("'" + arch + "' is not an architecture name");
  }
  const std::string generator = GeneratorPath();
  if (access(generator.c_str(), X_OK) != 0) {
    return Status::NotFound("llama.cpp's model generator " + generator +
                            " is missing (scripts/setup-llama.sh builds it; or set "
                            "PREFIXD_TEST_LLAMA_ARCHS)");
  }
  TempDir dir(out_path);
  if (dir.path().empty()) return Status::IOError("cannot create a folder next to " + out_path);
  const std::string log = dir.path() + "/generator.log";
  const int rc = Spawn({generator, "-a", "^" + arch + "$", "-s", std::to_string(seed), "-o",
                        dir.path() + "/"},
                       log);
  if (rc != 0) {
    return Status::Internal(generator + " failed for " + arch + " (exit " + std::to_string(rc) +
                            "): " + LogTail(log));
  }
  std::unique_ptr<UpstreamModel> model(new UpstreamModel());
  model->arch_ = arch;
  model->seed_ = seed;
  for (const char* variant : {"moe", "dense"}) {
    const std::string file = dir.path() + "/" + arch + "-" + variant + ".gguf";
    if (!fs::exists(file)) continue;
    gguf_init_params params = {/*no_alloc=*/false, /*ctx=*/&model->data_};
    model->gguf_ = gguf_init_from_file(file.c_str(), params);
    if (model->gguf_ == nullptr) return Status::Corruption("cannot read " + file);
    model->variant_ = variant;
    return model;
  }
  return Status::InvalidArgument("llama.cpp's generator writes no model for '" + arch + "'");
}

UpstreamModel::~UpstreamModel() {
  if (gguf_ != nullptr) gguf_free(gguf_);
  if (data_ != nullptr) ggml_free(data_);
}

GgufPtr UpstreamModel::BuildMetadata(const TokenizerChoice& tokenizer, uint32_t n_vocab,
                                     uint32_t n_ctx_train, const std::string& name,
                                     uint32_t nextn_layers) const {
  GgufPtr meta(gguf_init_empty());
  gguf_set_kv(meta.get(), gguf_);
  if (nextn_layers > 0) AddNextnLayers(meta.get(), arch_, nextn_layers);
  RemoveTokenizerKeys(meta.get());
  gguf_set_val_str(meta.get(), "general.name", name.c_str());
  AddTokenizer(meta.get(), tokenizer, n_vocab);
  const int64_t eos_id = gguf_find_key(meta.get(), "tokenizer.ggml.eos_token_id");
  const uint32_t eos = eos_id >= 0 ? gguf_get_val_u32(meta.get(), eos_id) : 0;
  ResizePleHeads(meta.get(), arch_, n_vocab, eos);
  gguf_set_val_u32(meta.get(), (arch_ + ".vocab_size").c_str(), n_vocab);
  gguf_set_val_u32(meta.get(), (arch_ + ".context_length").c_str(), n_ctx_train);
  const std::string orig_ctx = arch_ + ".rope.scaling.original_context_length";
  if (gguf_find_key(meta.get(), orig_ctx.c_str()) >= 0) {
    gguf_set_val_u32(meta.get(), orig_ctx.c_str(), n_ctx_train);
  }
  DeclareTypes(meta.get(), gguf_);
  AddVocabTensorTypes(meta.get(), n_vocab);
  return meta;
}

void UpstreamModel::FillTensor(ggml_tensor* tensor, void* upstream_model) {
  auto* self = static_cast<UpstreamModel*>(upstream_model);
  const ggml_tensor* src = ggml_get_tensor(self->data_, tensor->name);
  if (src != nullptr && src->type == tensor->type && ggml_are_same_shape(src, tensor)) {
    ggml_backend_tensor_set(tensor, src->data, 0, ggml_nbytes(tensor));
    return;
  }
  // Sized by the vocabulary: fresh values at the scale of the generator's. Or an optional
  // tensor llama.cpp's writer does not save (lfm2moe's dense_2, used only for embeddings): it
  // is not saved here either, any values do.
  const float stdev = src != nullptr ? Rms(src) : kGeneratorStdev;
  if (!FillNormal(tensor, self->seed_, stdev) && self->error_.empty()) {
    self->error_ = std::string("tensor ") + tensor->name + " has unsupported type " +
                   ggml_type_name(tensor->type);
  }
}

}  // namespace prefixd::engine::test_model
