// The pieces MakeTestModel is assembled from. Private to src/engine/test_model*.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml.h"
#include "gguf.h"
#include "util/status.h"

namespace prefixd::engine::test_model {

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

// Writes "general.*" and every "<arch>.*" hyper-parameter of `arch` into `ctx` and returns the
// number of layers written. InvalidArgument for an arch this file does not know.
Status AddArchMetadata(gguf_context* ctx, const std::string& arch, const BaseDims& dims,
                       uint32_t* n_layer);

// Declares the large matrices of an `n_layer` model as `type` in `ctx` (llama.cpp creates every
// tensor not declared there as F32). Names that the arch does not use are ignored by llama.cpp.
void AddWeightTypes(gguf_context* ctx, uint32_t n_layer, ggml_type type);

// Writes the tokenizer ("tokenizer.ggml.*", byte-level BPE with `n_vocab` tokens) into `ctx`.
// REQUIRES: n_vocab >= kMinVocab.
void AddTokenizer(gguf_context* ctx, uint32_t n_vocab);
inline constexpr uint32_t kMinVocab = 512;

// The Jinja chat template stored as "tokenizer.chat_template".
const std::string& ChatTemplate();

// Userdata for FillTensor, the llama_model_init_from_user callback.
struct WeightInit {
  uint64_t seed = 1;
  uint32_t n_layer = 1;     // scales the residual-branch output projections
  std::string error;        // set on an unsupported tensor type; the model is then discarded
};

// Fills `tensor` with deterministic random values for its name (see test_model_weights.cpp).
void FillTensor(ggml_tensor* tensor, void* weight_init);

}  // namespace prefixd::engine::test_model
