#include "engine/model/model.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

namespace prefixd::engine {

namespace {

void QuietLog(ggml_log_level level, const char* text, void* /*user*/) {
  static const bool verbose = std::getenv("PREFIXD_LLAMA_LOG") != nullptr;
  if (verbose || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

// A GGUF integer hyperparameter "<arch>.<key>", or 0 when absent.
int64_t MetaInt(const llama_model* model, const std::string& arch, const char* key) {
  char buf[64];
  const std::string k = arch + "." + key;
  if (llama_model_meta_val_str(model, k.c_str(), buf, sizeof buf) < 0) return 0;
  return std::strtoll(buf, nullptr, 10);
}

// SWA memory (llama_kv_cache_iswa): llama.cpp decides it with hparams.swa_type, which the
// public API does not show; n_swa > 0 is the sign for every arch but exaone4, whose
// load_arch_hparams sets an SWA type only for the 64-layer (32B) model.
bool HasSwaMemory(const llama_model* model, const std::string& arch) {
  if (llama_model_n_swa(model) <= 0) return false;
  if (arch == "exaone4") return llama_model_n_layer(model) == 64;
  return true;
}

// Mirrors llama_model::create_memory (src/llama-model.cpp) for the main context.
MemoryLayout DetectLayout(const llama_model* model, const std::string& arch) {
  if (arch == "deepseek4") return MemoryLayout::kDsv4;
  if (arch == "minimax-m3") return MemoryLayout::kMsa;
  if (arch == "glm-dsa" || arch == "deepseek32") return MemoryLayout::kDsa;
  if (arch == "dots3note") return MemoryLayout::kDsaIswa;
  if (arch == "hy_v4") {
    return MetaInt(model, arch, "attention.indexer.top_k") == 0 ? MemoryLayout::kAttention
                                                                : MemoryLayout::kDsa;
  }
  if (llama_model_is_recurrent(model)) return MemoryLayout::kRecurrent;
  const bool swa = HasSwaMemory(model, arch);
  if (llama_model_is_hybrid(model)) {
    if (swa) return MemoryLayout::kHybridIswa;
    // qwen4exp's indexer cache exists only when the GGUF has indexer tensors
    if (arch == "qwen4exp" && MetaInt(model, arch, "attention.indexer.key_length") > 0) {
      return MemoryLayout::kHybridIdx;
    }
    return MemoryLayout::kHybrid;
  }
  return swa ? MemoryLayout::kIswa : MemoryLayout::kAttention;
}

// llama_hparams::has_cell_ext: M-RoPE positions or PLE n-gram heads (ple_n_heads > 0, which
// the archs that have PLE derive from ple.ngram_size and ple.heads_per_ngram).
bool HasPle(const llama_model* model, const std::string& arch) {
  return MetaInt(model, arch, "ple.ngram_size") > 1 &&
         MetaInt(model, arch, "ple.heads_per_ngram") > 0;
}

bool IsMrope(const llama_model* model) {
  const llama_rope_type t = llama_model_rope_type(model);
  return t == LLAMA_ROPE_TYPE_MROPE || t == LLAMA_ROPE_TYPE_IMROPE;
}

StateFormat DetectStateFormat(const llama_model* model, const std::string& arch) {
  StateFormat f;
  f.layout = DetectLayout(model, arch);
  const bool ple = HasPle(model, arch);
  f.cell_ext = IsMrope(model) || ple;
  // llama_hparams::is_mla: both MLA head sizes set; such a cache has no V tensors
  f.kv_has_v = !(MetaInt(model, arch, "attention.key_length_mla") > 0 &&
                 MetaInt(model, arch, "attention.value_length_mla") > 0);
  f.index_has_v = f.kv_has_v;  // the DSA / MSA index caches copy the model's hparams
  f.index_cell_ext = f.cell_ext;
  if (f.layout == MemoryLayout::kHybridIdx) {
    // llama_memory_hybrid_idx: the indexer cache is MLA-shaped (K only), rope NONE
    f.index_has_v = false;
    f.index_cell_ext = ple;
    f.index_key_length = uint32_t(MetaInt(model, arch, "attention.indexer.key_length"));
  }
  return f;
}

// Why the model cannot serve causal completions, or OK. llama.cpp builds no memory for
// diffusion and embedding models and needs llama_encode for encoders: prefixd decodes only.
Status CheckCausal(const llama_model* model, const std::string& arch,
                   const std::string& causal_meta) {
  const std::string what = "model architecture '" + arch + "' ";
  const char* tail = ": prefixd serves causal (left-to-right) completions only";
  if (llama_model_is_diffusion(model)) {
    return Status::InvalidArgument(what + "is a diffusion model (non-causal, denoising)" + tail);
  }
  if (llama_model_has_encoder(model) || !llama_model_has_decoder(model)) {
    return Status::InvalidArgument(what + "has an encoder (encoder-only or encoder-decoder)" +
                                   tail);
  }
  if (causal_meta == "false") {
    return Status::InvalidArgument(what + "uses non-causal attention (an embedding model)" + tail);
  }
  return Status::OK();
}

// Rows of the learned absolute position table `position_embd.weight`, read from the GGUF's
// tensor index (metadata only); 0 when the file has none, -1 when the index cannot be read.
int64_t LearnedPositionRows(const std::string& path) {
  gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
  gguf_context* gguf = gguf_init_from_file(path.c_str(), params);
  if (gguf == nullptr) return -1;
  int64_t rows = 0;
  const int64_t id = gguf_find_tensor(gguf, "position_embd.weight");
  if (id >= 0) rows = gguf_get_tensor_ne(gguf, id)[1];
  gguf_free(gguf);
  return rows;
}

// See Model::n_pos_max(). Where the table cannot be looked for (an unreadable index, or a split
// model whose table may sit in another file), a model without RoPE and without recurrent state
// is capped at its trained length: conservative, as such models may use learned positions.
int PositionLimit(const llama_model* model, const std::string& path, bool split) {
  const int64_t rows = split ? -1 : LearnedPositionRows(path);
  if (rows > 0) return int(rows);
  if (rows == 0) return 0;
  const bool ropeless = llama_model_rope_type(model) == LLAMA_ROPE_TYPE_NONE;
  const bool stateful = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
  return ropeless && !stateful ? llama_model_n_ctx_train(model) : 0;
}

}  // namespace

void EnsureBackendInitialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(QuietLog, nullptr);
    llama_backend_init();
  });
}

namespace {

// Whether ggml's CPU backend offers its AMX weight buffers (a CPU with AMX).
bool CpuOffersAmx() {
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (cpu == nullptr) return false;
  auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(ggml_backend_reg_get_proc_address(
      ggml_backend_dev_backend_reg(cpu), "ggml_backend_dev_get_extra_bufts"));
  if (extra == nullptr) return false;
  for (ggml_backend_buffer_type_t* b = extra(cpu); b != nullptr && *b != nullptr; ++b) {
    if (std::string_view(ggml_backend_buft_name(*b)) == "AMX") return true;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::Load(const ModelOptions& options) {
  EnsureBackendInitialized();
  llama_model_params params = llama_model_default_params();
  // ggml's AMX matrix product, which llama.cpp picks for quantized weights on a CPU with AMX,
  // crashes the process on calls of a few rows: two sequences generating at once through a
  // Q8_0 output layer (llama.cpp #20824, open). Its F16 product (llama-server puts F16 weights
  // there too, 3-8% faster here) gives a request decoded beside other slots' tokens other
  // answers than decoded alone, top logprobs 0.08-0.10 apart: with it,
  // F16Weights/EngineCacheTest.ConcurrentRequestsMatchSequential/qwen35_f16 fails. On such a
  // CPU the weights stay in ggml's other buffers (no repacking either: llama.cpp turns the
  // extra buffer types off together).
  static const bool amx = CpuOffersAmx();
  if (amx) params.use_extra_bufts = false;
  params.n_gpu_layers = options.n_gpu_layers < 0 ? 999 : options.n_gpu_layers;
  params.vocab_only = options.vocab_only;
  params.load_mtp = options.load_mtp;
  PREFIXD_ASSIGN_OR_RETURN(auto devices, ResolveDevices(options.devices));
  std::vector<ggml_backend_dev_t> device_list;  // nullptr-terminated, as llama.cpp reads it
  if (devices.has_value()) {
    device_list = *devices;
    device_list.push_back(nullptr);
    params.devices = device_list.data();
  }
  llama_model* raw = llama_model_load_from_file(options.path.c_str(), params);
  if (raw == nullptr) {
    return Status::InvalidArgument("cannot load model '" + options.path +
                                   "' (missing, unreadable or not a GGUF model llama.cpp knows)");
  }
  std::unique_ptr<Model> model(new Model());
  model->model_ = raw;
  model->vocab_ = llama_model_get_vocab(raw);
  model->path_ = options.path;
  if (devices.has_value()) model->devices_ = DescribeDevices(*devices);
  model->computes_off_host_ = options.n_gpu_layers != 0 && ComputesOffHost(devices);
  model->rpc_servers_ = options.devices.rpc_servers;
  model->load_mtp_ = options.load_mtp;
  model->arch_ = model->Meta("general.architecture");
  model->format_ = DetectStateFormat(raw, model->arch_);
  if (options.vocab_only) return model;  // a tokenizer: nothing is decoded
  PREFIXD_RETURN_IF_ERROR(
      CheckCausal(raw, model->arch_, model->Meta(model->arch_ + ".attention.causal")));
  const std::string splits = model->Meta("split.count");
  model->n_pos_max_ = PositionLimit(raw, options.path, !splits.empty() && splits != "0" &&
                                                           splits != "1");
  return model;
}

Status Model::BackendStatus() const {
  for (const std::string& endpoint : rpc_servers_) {
    if (RpcServerLost(endpoint)) {
      return Status::IOError("backend lost: the rpc-server at " + endpoint +
                             " stopped answering; the tensors it held are gone, so this server "
                             "must be restarted once it is back (docs/backends.md)");
    }
  }
  return Status::OK();
}

Model::~Model() {
  if (model_ != nullptr) llama_model_free(model_);
}

std::vector<Token> Model::Tokenize(std::string_view text, bool parse_special,
                                  bool allow_bos) const {
  const bool add_bos = allow_bos && llama_vocab_get_add_bos(vocab_);
  int32_t n = -llama_tokenize(vocab_, text.data(), int32_t(text.size()), nullptr, 0, add_bos,
                              parse_special);
  std::vector<Token> tokens(n > 0 ? n : 0);
  if (n > 0) {
    llama_tokenize(vocab_, text.data(), int32_t(text.size()), tokens.data(), n, add_bos,
                   parse_special);
  }
  return tokens;
}

std::string Model::TokenPiece(Token token, bool render_special) const {
  if (token < 0 || token >= n_vocab()) return kNotAToken;
  char buf[256];
  int32_t n = llama_token_to_piece(vocab_, token, buf, sizeof buf, 0, render_special);
  if (n >= 0) return std::string(buf, n);
  std::string big(size_t(-n), '\0');
  n = llama_token_to_piece(vocab_, token, big.data(), int32_t(big.size()), 0, render_special);
  return n >= 0 ? big.substr(0, n) : std::string();
}

std::string Model::Detokenize(std::span<const Token> tokens, bool render_special) const {
  // A value out of the vocabulary (an image's row, engine/vision/image_tokens.h) is a
  // placeholder: llama.cpp would index past its tables. One per run of them.
  const int32_t vocab = n_vocab();
  auto bad = [vocab](Token t) { return t < 0 || t >= vocab; };
  if (std::any_of(tokens.begin(), tokens.end(), bad)) {
    std::string out;
    for (size_t i = 0; i < tokens.size();) {
      size_t j = i;
      if (bad(tokens[i])) {
        while (j < tokens.size() && bad(tokens[j])) ++j;
        out += kNotAToken;
      } else {
        while (j < tokens.size() && !bad(tokens[j])) ++j;
        out += Detokenize(tokens.subspan(i, j - i), render_special);
      }
      i = j;
    }
    return out;
  }
  std::string out(tokens.size() * 8 + 16, '\0');
  int32_t n = llama_detokenize(vocab_, tokens.data(), int32_t(tokens.size()), out.data(),
                               int32_t(out.size()), false, render_special);
  if (n < 0) {
    out.resize(size_t(-n));
    n = llama_detokenize(vocab_, tokens.data(), int32_t(tokens.size()), out.data(),
                         int32_t(out.size()), false, render_special);
  }
  out.resize(n > 0 ? size_t(n) : 0);
  return out;
}

bool Model::IsEndOfGeneration(Token token) const { return llama_vocab_is_eog(vocab_, token); }

Token Model::FindSpecialToken(std::string_view text) const {
  std::vector<Token> t = Tokenize(text, true);
  if (t.size() != 1 || TokenPiece(t[0], true) != text) return -1;
  return t[0];
}

int Model::n_vocab() const { return llama_vocab_n_tokens(vocab_); }
int Model::n_ctx_train() const { return llama_model_n_ctx_train(model_); }
int Model::n_swa() const { return llama_model_n_swa(model_); }
uint32_t Model::rope_positions() const {
  const llama_rope_type t = llama_model_rope_type(model_);
  return t == LLAMA_ROPE_TYPE_MROPE || t == LLAMA_ROPE_TYPE_IMROPE ? 4 : 1;
}

int Model::n_layer_nextn() const { return load_mtp_ ? llama_model_n_layer_nextn(model_) : 0; }

std::string Model::ChatTemplate() const {
  const char* t = llama_model_chat_template(model_, nullptr);
  return t ? std::string(t) : std::string();
}

std::string Model::Meta(const std::string& key) const {
  char buf[512];
  int32_t n = llama_model_meta_val_str(model_, key.c_str(), buf, sizeof buf);
  if (n < 0) return std::string();
  if (size_t(n) < sizeof buf) return std::string(buf, n);
  std::string big(size_t(n) + 1, '\0');
  llama_model_meta_val_str(model_, key.c_str(), big.data(), big.size());
  big.resize(n);
  return big;
}

}  // namespace prefixd::engine
