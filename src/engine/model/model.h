// Model: a loaded GGUF model and its vocabulary. Immutable after Load(); every method is
// thread-safe. Owns the llama_model.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/codec/types.h"
#include "engine/model/devices.h"
#include "util/status.h"

struct llama_model;
struct llama_vocab;

namespace prefixd::engine {

struct ModelOptions {
  std::string path;
  int n_gpu_layers = 0;  // -1: all layers on the GPU when a GPU backend is present
  bool vocab_only = false;  // the tokenizer and metadata only (tests of real tokenizers)
  bool load_mtp = false;    // also the NextN (MTP) layers, which llama.cpp skips otherwise
  DeviceChoice devices;     // --rpc / --device; empty: llama.cpp's default devices
};

inline constexpr char kNotAToken[] = "<image>";

class Model {
 public:
  // Loads the model. InvalidArgument when the file cannot be loaded, or when the model cannot
  // serve causal completions (diffusion models, encoder or encoder-decoder models, non-causal
  // attention): the message names the architecture and the reason.
  static Result<std::unique_ptr<Model>> Load(const ModelOptions& options);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Tokenizes exactly as a prompt is tokenized: special tokens in the text are parsed when
  // `parse_special`; no BOS is added unless the model asks for one and `allow_bos`.
  std::vector<Token> Tokenize(std::string_view text, bool parse_special = true,
                              bool allow_bos = true) const;
  // The text of the tokens; special tokens are rendered when `render_special`. A value outside
  // the vocabulary (an image's rows) reads as kNotAToken, once per run of them.
  std::string Detokenize(std::span<const Token> tokens, bool render_special = true) const;
  std::string TokenPiece(Token token, bool render_special = true) const;
  bool IsEndOfGeneration(Token token) const;
  // The id of a special token given by its text (e.g. "<|im_start|>"), or -1.
  Token FindSpecialToken(std::string_view text) const;

  int n_vocab() const;
  int n_ctx_train() const;
  // The most positions the model can evaluate: the rows of its learned absolute position table
  // (`position_embd`: gpt2, starcoder, mpt, ...), beyond which llama.cpp would index past the
  // table and abort; 0 when positions are not bounded by the weights (RoPE, ALiBi, recurrent).
  int n_pos_max() const { return n_pos_max_; }
  int n_swa() const;
  // Positions rope takes per token: 4 on an M-RoPE model (time, height, width, unused:
  // Qwen2/3-VL, Qwen3.5), else 1.
  uint32_t rope_positions() const;
  int n_layer_nextn() const;  // multi-token-prediction heads loaded (ModelOptions::load_mtp)
  const std::string& arch() const { return arch_; }
  const std::string& path() const { return path_; }
  // Where the layers were offered, for the start log: "CPU only", "RPC0 (127.0.0.1:50052)", or
  // "default" when no device was chosen (llama.cpp's own selection).
  const std::string& devices() const { return devices_; }
  // Whether layers were offloaded (n_gpu_layers) to a device off the host (ComputesOffHost):
  // the host's cores then wait on it for most of the model's time.
  bool computes_off_host() const { return computes_off_host_; }
  // IOError naming the rpc-server when one this model's tensors live on was lost (RpcServerLost):
  // every compute and state read or write on it is void from then on.
  Status BackendStatus() const;
  MemoryLayout layout() const { return format_.layout; }
  // How the codec reads this model's states (memory type, MLA, cell ext, index cache), from
  // the arch and the GGUF hyperparameters (mirrors llama_model::create_memory).
  const StateFormat& state_format() const { return format_; }
  // True when the KV cells carry llama.cpp's 12-byte cell ext (M-RoPE 2D positions or PLE).
  bool has_cell_ext() const { return format_.cell_ext; }
  // The built-in chat template, or "" when the model has none.
  std::string ChatTemplate() const;
  // A metadata value by key, or "".
  std::string Meta(const std::string& key) const;

  llama_model* raw() const { return model_; }
  const llama_vocab* vocab() const { return vocab_; }

 private:
  Model() = default;
  llama_model* model_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::string arch_;
  std::string path_;
  std::string devices_ = "default";
  bool computes_off_host_ = false;
  std::vector<std::string> rpc_servers_;  // the rpc-servers its devices may be on
  StateFormat format_;
  int n_pos_max_ = 0;
  bool load_mtp_ = false;
};

// Initializes llama.cpp's backends once per process and routes its log to ours (quiet unless
// PREFIXD_LLAMA_LOG=1). Safe to call from several threads.
void EnsureBackendInitialized();

}  // namespace prefixd::engine
