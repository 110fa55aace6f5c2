// A scripted test model's table (TestModelSpec::script). With a trunk whose residual branches
// write zero, the final hidden state is rmsnorm(embedding of the last token), so the greedy next
// token is a function of the last token alone, set here by the embeddings and the LM head:
//  - dimension 0 marks "any other token": every embedding row gets 1 there (over its random
//    values scaled down), and the first script token's LM-head row reads it;
//  - script token i (all distinct) has the embedding e_{i+1} alone, and the row of the token
//    that follows it (the next script token, or end of turn after the last) reads dimension
//    i+1.
// Dimensions 0..n of every other LM-head row are zero, so the chosen token leads by about
// kWeight * sqrt(n_embd) logits (~320 for tiny): sampling at any usual temperature follows.
#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "engine/testgen/test_model_internal.h"
#include "ggml-backend.h"
#include "llama.h"

namespace prefixd::engine::test_model {
namespace {

constexpr float kWeight = 40.0f;
constexpr float kNoise = 0.1f;  // what is left of an embedding row's random values

Result<std::vector<llama_token>> Tokenize(const llama_vocab* vocab, const std::string& text) {
  const int32_t n = -llama_tokenize(vocab, text.data(), int32_t(text.size()), nullptr, 0,
                                    /*add_special=*/false, /*parse_special=*/true);
  std::vector<llama_token> tokens(size_t(std::max(n, 0)));
  if (n <= 0 || llama_tokenize(vocab, text.data(), int32_t(text.size()), tokens.data(), n, false,
                               true) != n) {
    return Status::InvalidArgument("the script is empty or cannot be tokenized");
  }
  return tokens;
}

std::string Piece(const llama_vocab* vocab, llama_token t) {
  char buf[128];
  const int32_t n = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, true);
  return n > 0 ? std::string(buf, size_t(n)) : "#" + std::to_string(t);
}

Status CheckScript(const llama_vocab* vocab, const std::vector<llama_token>& tokens,
                   llama_token end, int64_t n_embd) {
  if (int64_t(tokens.size()) > n_embd - 1) {
    return Status::InvalidArgument("the script is " + std::to_string(tokens.size()) +
                                   " tokens; this model's width holds at most " +
                                   std::to_string(n_embd - 1));
  }
  std::map<llama_token, size_t> seen;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == end) return Status::InvalidArgument("the script holds the end-of-turn token");
    if (!seen.emplace(tokens[i], i).second) {
      return Status::InvalidArgument("the script's token '" + Piece(vocab, tokens[i]) +
                                     "' comes twice: what follows it would be ambiguous");
    }
  }
  return Status::OK();
}

// A tensor's values as floats, and back in its own type.
std::vector<float> ReadFloats(const ggml_tensor* t) {
  std::vector<uint8_t> raw(ggml_nbytes(t));
  ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
  std::vector<float> out(size_t(ggml_nelements(t)));
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(out.data(), raw.data(), raw.size());
  } else {
    ggml_get_type_traits(t->type)->to_float(raw.data(), out.data(), int64_t(out.size()));
  }
  return out;
}

void WriteFloats(const ggml_tensor* t, const std::vector<float>& v) {
  std::vector<uint8_t> raw(ggml_nbytes(t));
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(raw.data(), v.data(), raw.size());
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(v.data(), reinterpret_cast<ggml_fp16_t*>(raw.data()), int64_t(v.size()));
  } else {
    ggml_quantize_chunk(t->type, v.data(), raw.data(), 0, t->ne[1], t->ne[0], nullptr);
  }
  ggml_backend_tensor_set(const_cast<ggml_tensor*>(t), raw.data(), 0, raw.size());
}

const ggml_tensor* Find(const std::vector<const ggml_tensor*>& tensors, const char* name) {
  for (const ggml_tensor* t : tensors) {
    if (std::strcmp(t->name, name) == 0) return t;
  }
  return nullptr;
}

void WriteEmbeddings(const ggml_tensor* t, const std::vector<llama_token>& script) {
  std::vector<float> v = ReadFloats(t);
  const int64_t n_embd = t->ne[0];
  for (int64_t row = 0; row < t->ne[1]; ++row) {
    float* r = v.data() + row * n_embd;
    for (int64_t k = 0; k < n_embd; ++k) r[k] *= kNoise;
    r[0] = 1.0f;
  }
  for (size_t i = 0; i < script.size(); ++i) {
    float* r = v.data() + int64_t(script[i]) * n_embd;
    std::fill(r, r + n_embd, 0.0f);
    r[i + 1] = 1.0f;
  }
  WriteFloats(t, v);
}

void WriteHead(const ggml_tensor* t, const std::vector<llama_token>& script, llama_token end) {
  std::vector<float> v = ReadFloats(t);
  const int64_t n_embd = t->ne[0];
  const size_t n = script.size();
  for (int64_t row = 0; row < t->ne[1]; ++row) {
    std::fill(v.data() + row * n_embd, v.data() + row * n_embd + int64_t(n) + 1, 0.0f);
  }
  v[size_t(script[0]) * n_embd] = kWeight;  // after any other token
  for (size_t i = 0; i < n; ++i) {
    const llama_token next = i + 1 < n ? script[i + 1] : end;
    v[size_t(next) * n_embd + i + 1] = kWeight;
  }
  WriteFloats(t, v);
}

}  // namespace

Status ApplyScript(const llama_model* model, const std::vector<const ggml_tensor*>& tensors,
                   const std::string& script) {
  const llama_vocab* vocab = llama_model_get_vocab(model);
  PREFIXD_ASSIGN_OR_RETURN(std::vector<llama_token> tokens, Tokenize(vocab, script));
  llama_token end = llama_vocab_eot(vocab);
  if (end == LLAMA_TOKEN_NULL) end = llama_vocab_eos(vocab);
  const ggml_tensor* embd = Find(tensors, "token_embd.weight");
  const ggml_tensor* head = Find(tensors, "output.weight");
  if (embd == nullptr || head == nullptr) {
    return Status::InvalidArgument("a scripted model needs its own token_embd and output tensors");
  }
  PREFIXD_RETURN_IF_ERROR(CheckScript(vocab, tokens, end, embd->ne[0]));
  WriteEmbeddings(embd, tokens);
  WriteHead(head, tokens, end);
  return Status::OK();
}

}  // namespace prefixd::engine::test_model
