// Real tokenizers for test models: every "tokenizer.*" key of a vocab-only GGUF (the pinned
// source's models/ggml-vocab-*.gguf, or any file), copied through gguf's API, and optionally a
// chat template of models/templates in place of the vocab's own.
#include <cstring>
#include <string>
#include <vector>

#include "engine/chat/pinned_assets.h"
#include "engine/testgen/test_model_internal.h"

namespace prefixd::engine::test_model {
namespace {

bool IsTokenizerKey(const char* key) { return std::strncmp(key, "tokenizer.", 10) == 0; }

void RemoveTokenizerKeys(gguf_context* ctx) {
  for (int64_t i = gguf_get_n_kv(ctx) - 1; i >= 0; --i) {
    const std::string key = gguf_get_key(ctx, i);
    if (IsTokenizerKey(key.c_str())) gguf_remove_key(ctx, key.c_str());
  }
}

// Above this many tokens the vocabulary-sized tensors are Q8_0 (prefixd's own has 640-32768).
constexpr uint32_t kLargeVocab = 65536;

// Copies scalar key `i` of `src` into `dst`.
void CopyScalar(gguf_context* dst, const gguf_context* src, int64_t i) {
  const char* key = gguf_get_key(src, i);
  switch (gguf_get_kv_type(src, i)) {
    case GGUF_TYPE_UINT8: gguf_set_val_u8(dst, key, gguf_get_val_u8(src, i)); break;
    case GGUF_TYPE_INT8: gguf_set_val_i8(dst, key, gguf_get_val_i8(src, i)); break;
    case GGUF_TYPE_UINT16: gguf_set_val_u16(dst, key, gguf_get_val_u16(src, i)); break;
    case GGUF_TYPE_INT16: gguf_set_val_i16(dst, key, gguf_get_val_i16(src, i)); break;
    case GGUF_TYPE_UINT32: gguf_set_val_u32(dst, key, gguf_get_val_u32(src, i)); break;
    case GGUF_TYPE_INT32: gguf_set_val_i32(dst, key, gguf_get_val_i32(src, i)); break;
    case GGUF_TYPE_FLOAT32: gguf_set_val_f32(dst, key, gguf_get_val_f32(src, i)); break;
    case GGUF_TYPE_UINT64: gguf_set_val_u64(dst, key, gguf_get_val_u64(src, i)); break;
    case GGUF_TYPE_INT64: gguf_set_val_i64(dst, key, gguf_get_val_i64(src, i)); break;
    case GGUF_TYPE_FLOAT64: gguf_set_val_f64(dst, key, gguf_get_val_f64(src, i)); break;
    case GGUF_TYPE_BOOL: gguf_set_val_bool(dst, key, gguf_get_val_bool(src, i)); break;
    case GGUF_TYPE_STRING: gguf_set_val_str(dst, key, gguf_get_val_str(src, i)); break;
    default: break;
  }
}

}  // namespace

// Copies key `i` of `src` into `dst` (scalars, strings and arrays of either).
void CopyKey(gguf_context* dst, const gguf_context* src, int64_t i) {
  const char* key = gguf_get_key(src, i);
  if (gguf_get_kv_type(src, i) != GGUF_TYPE_ARRAY) {
    CopyScalar(dst, src, i);
  } else if (gguf_get_arr_type(src, i) == GGUF_TYPE_STRING) {
    std::vector<const char*> strs(gguf_get_arr_n(src, i));
    for (size_t j = 0; j < strs.size(); ++j) strs[j] = gguf_get_arr_str(src, i, j);
    gguf_set_arr_str(dst, key, strs.data(), strs.size());
  } else {
    gguf_set_arr_data(dst, key, gguf_get_arr_type(src, i), gguf_get_arr_data(src, i),
                      gguf_get_arr_n(src, i));
  }
}


Result<TokenizerChoice> LoadTokenizerChoice(const std::string& vocab,
                                            const std::string& chat_template) {
  TokenizerChoice choice;
  if (!vocab.empty()) {
    PREFIXD_ASSIGN_OR_RETURN(choice.vocab_path, ResolveVocabPath(vocab));
    gguf_init_params params = {/*no_alloc=*/true, /*ctx=*/nullptr};
    choice.vocab.reset(gguf_init_from_file(choice.vocab_path.c_str(), params));
    if (!choice.vocab) return Status::Corruption("cannot read GGUF " + choice.vocab_path);
    const int64_t id = gguf_find_key(choice.vocab.get(), "tokenizer.ggml.tokens");
    if (id < 0 || gguf_get_kv_type(choice.vocab.get(), id) != GGUF_TYPE_ARRAY ||
        gguf_get_arr_n(choice.vocab.get(), id) == 0) {
      return Status::Corruption(choice.vocab_path + " has no tokenizer.ggml.tokens");
    }
  }
  if (!chat_template.empty()) {
    PREFIXD_ASSIGN_OR_RETURN(choice.chat_template, LoadTemplateSource(chat_template));
    choice.has_template = true;
  }
  return choice;
}

uint32_t VocabSize(const TokenizerChoice& choice, uint32_t own_n_vocab) {
  if (!choice.vocab) return own_n_vocab;
  const int64_t id = gguf_find_key(choice.vocab.get(), "tokenizer.ggml.tokens");
  return uint32_t(gguf_get_arr_n(choice.vocab.get(), id));
}

void AddTokenizer(gguf_context* ctx, const TokenizerChoice& choice, uint32_t n_vocab) {
  RemoveTokenizerKeys(ctx);
  if (!choice.vocab) {
    AddTokenizer(ctx, n_vocab);
  } else {
    for (int64_t i = 0; i < gguf_get_n_kv(choice.vocab.get()); ++i) {
      if (IsTokenizerKey(gguf_get_key(choice.vocab.get(), i))) CopyKey(ctx, choice.vocab.get(), i);
    }
  }
  if (choice.has_template) {
    gguf_set_val_str(ctx, "tokenizer.chat_template", choice.chat_template.c_str());
  }
}

void AddVocabTensorTypes(gguf_context* ctx, uint32_t n_vocab) {
  if (n_vocab <= kLargeVocab) return;
  for (const char* name : {"token_embd.weight", "output.weight", "per_layer_token_embd.weight"}) {
    if (gguf_find_tensor(ctx, name) >= 0) continue;
    ggml_tensor t;
    std::memset(&t, 0, sizeof(t));
    t.type = GGML_TYPE_Q8_0;
    ggml_set_name(&t, name);
    gguf_add_tensor(ctx, &t);
  }
}

}  // namespace prefixd::engine::test_model
