// The pieces MakeTestModel is assembled from. Private to src/engine/test_model*.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ggml.h"
#include "engine/testgen/test_model.h"
#include "gguf.h"

struct llama_model;
#include "util/status.h"

namespace prefixd::engine::test_model {

struct GgufFree {
  void operator()(gguf_context* ctx) const { gguf_free(ctx); }
};
using GgufPtr = std::unique_ptr<gguf_context, GgufFree>;

// The dimensions every architecture starts from; each arch adapts them (test_model_arch.cpp).
struct BaseDims {
  uint32_t n_embd = 64;
  uint32_t n_layer = 4;
  uint32_t n_head = 4;
  uint32_t n_head_kv = 2;
  uint32_t head_dim = 16;
  uint32_t n_ff = 128;
  uint32_t n_vocab = 640;
  uint32_t n_swa = 32;          // sliding window, in tokens
  uint32_t n_ctx_train = 65536;
  ggml_type weight_type = GGML_TYPE_F32;  // type of the large matrices
};

// Returns the base dimensions of a shape ("tiny", "small", "medium"), or InvalidArgument.
Status ShapeDims(const std::string& shape, BaseDims* dims);

// True when AddArchMetadata knows `arch` (prefixd describes it itself).
bool HasArchMetadata(const std::string& arch);
// "qwen35, qwen3next": NextnTestModelArchs() for messages.
std::string NextnArchList();

// Writes "general.*" and every "<arch>.*" hyper-parameter of `arch` into `ctx` and returns the
// number of layers written. InvalidArgument for an arch this file does not know.
// With `nextn_layers`, that many MTP blocks follow the trunk ("block_count" counts both, as in
// llama.cpp) and *n_layer is the total. InvalidArgument for an arch with no MTP graph.
Status AddArchMetadata(gguf_context* ctx, const std::string& arch, const BaseDims& dims,
                       uint32_t* n_layer, uint32_t nextn_layers = 0);

// Declares the large matrices of an `n_layer` model as `type` in `ctx` (llama.cpp creates every
// tensor not declared there as F32). Names that the arch does not use are ignored by llama.cpp.
void AddWeightTypes(gguf_context* ctx, uint32_t n_layer, ggml_type type);

// Writes the tokenizer ("tokenizer.ggml.*", byte-level BPE with `n_vocab` tokens) into `ctx`.
// REQUIRES: n_vocab >= kMinVocab.
void AddTokenizer(gguf_context* ctx, uint32_t n_vocab);
inline constexpr uint32_t kMinVocab = 512;

// The Jinja chat template stored as "tokenizer.chat_template".
const std::string& ChatTemplate();

// Copies key `i` of `src` into `dst` (scalars, strings and arrays of either).
void CopyKey(gguf_context* dst, const gguf_context* src, int64_t i);

// The tokenizer and chat template a test model gets (test_model_vocab.cpp): prefixd's own
// (AddTokenizer), or every "tokenizer.*" key of a real vocab GGUF (TestModelSpec::vocab), with
// the chat template optionally replaced (TestModelSpec::chat_template).
struct TokenizerChoice {
  GgufPtr vocab;              // null: prefixd's own tokenizer
  std::string vocab_path;     // the resolved vocab file, for messages
  bool has_template = false;  // chat_template replaces the tokenizer's template
  std::string chat_template;  // Jinja source
};

// Resolves and reads the spec's vocab and template (names inside the pinned source, or files).
// NotFound when one is missing, Corruption when the vocab is not a GGUF with tokens.
Result<TokenizerChoice> LoadTokenizerChoice(const std::string& vocab,
                                            const std::string& chat_template);
// The vocabulary size: the vocab's token count, or `own_n_vocab` for prefixd's tokenizer.
uint32_t VocabSize(const TokenizerChoice& choice, uint32_t own_n_vocab);
// Writes the chosen tokenizer and template into `ctx`, replacing any "tokenizer.*" keys there.
// REQUIRES: n_vocab == VocabSize(choice, n_vocab).
void AddTokenizer(gguf_context* ctx, const TokenizerChoice& choice, uint32_t n_vocab);
// Declares the vocabulary-sized tensors Q8_0 when the vocabulary is large (a real one), so that
// tiny models with a 250K-token vocabulary stay a few tens of MB. Skips names `ctx` declares.
void AddVocabTensorTypes(gguf_context* ctx, uint32_t n_vocab);

// Userdata for FillTensor, the llama_model_init_from_user callback.
struct WeightInit {
  uint64_t seed = 1;
  uint32_t n_layer = 1;     // scales the residual-branch output projections
  bool predictable = false;  // TestModelSpec::predictable
  std::string error;        // set on an unsupported tensor type; the model is then discarded
};

// Fills `tensor` with deterministic random values for its name (see test_model_weights.cpp).
void FillTensor(ggml_tensor* tensor, void* weight_init);

// How the tensors of a model described by its metadata get their values: `fill` is called
// by llama_model_init_from_user for each tensor with `userdata`.
struct Weights {
  void (*fill)(ggml_tensor* tensor, void* userdata) = nullptr;
  void* userdata = nullptr;
  const std::string* error = nullptr;  // set by `fill` when it cannot fill a tensor
  // Run on the built model before it is written, with every tensor `fill` filled (a script
  // table needs the model's own vocabulary: ApplyScript). Empty: nothing.
  std::function<Status(const llama_model*, const std::vector<const ggml_tensor*>&)> finish;
};

// TestModelSpec::script: tokenizes the script with the model's vocabulary and writes the table
// "each script token -> its follower (the most preferred first, by TestScript::ranks), the
// last -> end of turn, any other token -> the first" into token_embd.weight and
// output.weight. REQUIRES: a trunk whose residual branches write zero
// (WeightInit::predictable), so the last hidden state is the last token's embedding.
// InvalidArgument when a token is followed by different tokens that its ranks do not order
// (the table could not say what follows it), when the script holds the end-of-turn token, is
// empty, or has more distinct tokens than n_embd - 1, and for a rank that names more than one
// token, a token the script does not hold, the same follower twice, or more than kMaxRanks.
Status ApplyScript(const llama_model* model, const std::vector<const ggml_tensor*>& tensors,
                   const TestScript& script);

// Builds the model described by `meta` with llama.cpp (on the CPU), fills it by `weights`,
// writes it as GGUF with every key of `meta` and the description `desc` (through a temporary
// file next to `out_path`, renamed into place once complete). `with_mtp`: the NextN blocks
// `meta` declares are built and written (llama.cpp skips them otherwise).
Status WriteModel(gguf_context* meta, const Weights& weights, const std::string& desc,
                  const std::string& out_path, bool with_mtp = false);

// Fills `tensor` (F32, F16 or Q8_0) with N(0, stdev) values drawn from `seed` and its name, by
// the same generator as FillTensor. Returns false for another type.
bool FillNormal(ggml_tensor* tensor, uint64_t seed, float stdev);

// Test models of the archs that prefixd does not describe itself, made by the pinned
// llama.cpp's own generator (tests/test-llama-archs.cpp) and given prefixd's tokenizer
// (test_model_upstream.cpp). One generated model, read back, owns its tensors' data.
class UpstreamModel {
 public:
  // Runs the generator for `arch` with `seed` in a folder next to `out_path` and reads the
  // model it writes (the MoE variant when it writes both). NotFound when the generator is
  // missing; InvalidArgument when it writes no model of that name.
  static Result<std::unique_ptr<UpstreamModel>> Generate(const std::string& arch, uint64_t seed,
                                                         const std::string& out_path);
  ~UpstreamModel();
  UpstreamModel(const UpstreamModel&) = delete;
  UpstreamModel& operator=(const UpstreamModel&) = delete;

  // The generator's metadata with the tokenizer replaced by AddTokenizer(tokenizer, n_vocab), the
  // vocabulary-sized hyper-parameters resized, the context length set to `n_ctx_train` and
  // "general.name" set; tensors that are not F32 are declared with their type.
  // With `nextn_layers`, that many NextN (MTP) blocks follow the trunk.
  GgufPtr BuildMetadata(const TokenizerChoice& tokenizer, uint32_t n_vocab, uint32_t n_ctx_train,
                        const std::string& name, uint32_t nextn_layers = 0) const;

  // The llama_model_init_from_user callback (userdata: this): a tensor of the generator's shape
  // and type gets the generator's bytes; one that llama.cpp sized from the new vocabulary gets
  // FillNormal values at the scale (RMS) of the generator's tensor of that name, and one the
  // generator did not save (optional) FillNormal values at the generator's scale.
  static void FillTensor(ggml_tensor* tensor, void* upstream_model);

  // The generator's tensors, with their data.
  const ggml_context* tensors() const { return data_; }
  // "moe" or "dense": the variant the generator wrote. Set by Generate.
  const std::string& variant() const { return variant_; }
  // Set when FillTensor met a tensor it cannot fill; the model is then discarded.
  const std::string& error() const { return error_; }

 private:
  UpstreamModel() = default;
  std::string arch_;
  std::string variant_;
  uint64_t seed_ = 1;
  gguf_context* gguf_ = nullptr;
  ggml_context* data_ = nullptr;
  std::string error_;
};

}  // namespace prefixd::engine::test_model
