// A scripted test model's table (TestModelSpec::script). With a trunk whose residual branches
// write zero, the final hidden state is rmsnorm(embedding of the last token), so the greedy next
// token is a function of the last token alone, set here by the embeddings and the LM head:
//  - dimension 0 marks "any other token": every embedding row gets 1 there (over its random
//    values scaled down), and the first script token's LM-head row reads it;
//  - the script's i-th distinct token has the embedding e_{i+1} alone, and the rows of the
//    tokens that follow it (the next script token, or end of turn after the last) read
//    dimension i+1: kWeight for the one it prefers, kRankStep less for each next in its rank.
// Dimensions 0..n of every other LM-head row are zero, so the chosen token leads by about
// kWeight * sqrt(n_embd) logits (~320 for tiny), and each ranked follower the next by
// kRankStep * sqrt(n_embd) (~64): sampling at any usual temperature follows, and a grammar
// that rules out the preferred follower gets the next one it allows.
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
constexpr float kRankStep = 8.0f;
static_assert(kWeight - float(TestScript::kMaxRanks - 1) * kRankStep > 0.0f,
              "the least preferred follower still leads every other token");
constexpr float kNoise = 0.1f;  // what is left of an embedding row's random values

Result<std::vector<llama_token>> Tokenize(const llama_vocab* vocab, const std::string& text) {
  const int32_t n = -llama_tokenize(vocab, text.data(), int32_t(text.size()), nullptr, 0,
                                    /*add_special=*/false, /*parse_special=*/true);
  std::vector<llama_token> tokens(size_t(std::max(n, 0)));
  if (n <= 0 || llama_tokenize(vocab, text.data(), int32_t(text.size()), tokens.data(), n, false,
                               true) != n) {
    return Status::InvalidArgument("the script's part '" + text +
                                   "' is empty or cannot be tokenized");
  }
  return tokens;
}

std::string Piece(const llama_vocab* vocab, llama_token t) {
  char buf[128];
  const int32_t n = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, true);
  return n > 0 ? std::string(buf, size_t(n)) : "#" + std::to_string(t);
}

// The script as the model holds it: its tokens, each distinct token once (the i-th has
// dimension i+1), and each distinct token's followers, the preferred first.
struct Table {
  std::vector<llama_token> tokens;
  std::vector<llama_token> distinct;
  std::map<llama_token, std::vector<llama_token>> next;
};

// One token, for a rank's key or follower ("" is the end of the turn).
Result<llama_token> RankToken(const llama_vocab* vocab, const std::string& text, llama_token end) {
  if (text.empty()) return end;
  PREFIXD_ASSIGN_OR_RETURN(std::vector<llama_token> t, Tokenize(vocab, text));
  if (t.size() != 1) {
    return Status::InvalidArgument("the script's rank names '" + text + "', which is " +
                                   std::to_string(t.size()) + " tokens, not one");
  }
  return t[0];
}

// `followers` (in the order the script puts them after `t`) ordered by `t`'s rank, if any.
Result<std::vector<llama_token>> Ranked(const llama_vocab* vocab, const TestScript& script,
                                        llama_token t, llama_token end,
                                        const std::vector<llama_token>& followers) {
  for (const auto& [key, texts] : script.ranks) {
    PREFIXD_ASSIGN_OR_RETURN(llama_token k, RankToken(vocab, key, end));
    if (k != t) continue;
    if (texts.size() > TestScript::kMaxRanks) {
      return Status::InvalidArgument("the script ranks " + std::to_string(texts.size()) +
                                     " followers of '" + key + "'; at most " +
                                     std::to_string(TestScript::kMaxRanks));
    }
    std::vector<llama_token> out;
    for (const std::string& text : texts) {
      PREFIXD_ASSIGN_OR_RETURN(llama_token f, RankToken(vocab, text, end));
      if (std::find(out.begin(), out.end(), f) != out.end()) {
        return Status::InvalidArgument("the script ranks '" + text + "' twice after '" + key + "'");
      }
      out.push_back(f);
    }
    for (llama_token f : followers) {
      if (std::find(out.begin(), out.end(), f) == out.end()) {
        return Status::InvalidArgument("the script puts '" + Piece(vocab, f) + "' after '" +
                                       key + "', which its rank leaves out");
      }
    }
    return out;
  }
  if (followers.size() > 1) {
    return Status::InvalidArgument("the script's token '" + Piece(vocab, t) +
                                   "' comes twice: what follows it would be ambiguous (unless "
                                   "a rank orders its followers for a grammar to choose among)");
  }
  return followers;
}

Result<Table> BuildTable(const llama_vocab* vocab, const TestScript& script, llama_token end,
                         int64_t n_embd) {
  Table table;
  for (const std::string& part : script.parts) {
    PREFIXD_ASSIGN_OR_RETURN(std::vector<llama_token> t, Tokenize(vocab, part));
    table.tokens.insert(table.tokens.end(), t.begin(), t.end());
  }
  if (table.tokens.empty()) return Status::InvalidArgument("the script is empty");
  std::map<llama_token, std::vector<llama_token>> followers;
  for (size_t i = 0; i < table.tokens.size(); ++i) {
    const llama_token t = table.tokens[i];
    if (t == end) return Status::InvalidArgument("the script holds the end-of-turn token");
    if (!followers.count(t)) table.distinct.push_back(t);
    std::vector<llama_token>& f = followers[t];
    const llama_token next = i + 1 < table.tokens.size() ? table.tokens[i + 1] : end;
    if (std::find(f.begin(), f.end(), next) == f.end()) f.push_back(next);
  }
  if (int64_t(table.distinct.size()) > n_embd - 1) {
    return Status::InvalidArgument("the script is " + std::to_string(table.distinct.size()) +
                                   " distinct tokens; this model's width holds at most " +
                                   std::to_string(n_embd - 1));
  }
  for (const auto& [key, texts] : script.ranks) {
    PREFIXD_ASSIGN_OR_RETURN(llama_token k, RankToken(vocab, key, end));
    if (!followers.count(k)) {
      return Status::InvalidArgument("the script ranks the followers of '" + key +
                                     "', which it does not hold");
    }
  }
  for (llama_token t : table.distinct) {
    PREFIXD_ASSIGN_OR_RETURN(table.next[t], Ranked(vocab, script, t, end, followers[t]));
  }
  return table;
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

void WriteEmbeddings(const ggml_tensor* t, const Table& table) {
  std::vector<float> v = ReadFloats(t);
  const int64_t n_embd = t->ne[0];
  for (int64_t row = 0; row < t->ne[1]; ++row) {
    float* r = v.data() + row * n_embd;
    for (int64_t k = 0; k < n_embd; ++k) r[k] *= kNoise;
    r[0] = 1.0f;
  }
  for (size_t i = 0; i < table.distinct.size(); ++i) {
    float* r = v.data() + int64_t(table.distinct[i]) * n_embd;
    std::fill(r, r + n_embd, 0.0f);
    r[i + 1] = 1.0f;
  }
  WriteFloats(t, v);
}

void WriteHead(const ggml_tensor* t, const Table& table) {
  std::vector<float> v = ReadFloats(t);
  const int64_t n_embd = t->ne[0];
  const int64_t n = int64_t(table.distinct.size());
  for (int64_t row = 0; row < t->ne[1]; ++row) {
    std::fill(v.data() + row * n_embd, v.data() + row * n_embd + n + 1, 0.0f);
  }
  v[size_t(table.tokens[0]) * n_embd] = kWeight;  // after any other token
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<llama_token>& next = table.next.at(table.distinct[size_t(i)]);
    for (size_t r = 0; r < next.size(); ++r) {
      v[size_t(next[r]) * n_embd + i + 1] = kWeight - float(r) * kRankStep;
    }
  }
  WriteFloats(t, v);
}

}  // namespace

Status ApplyScript(const llama_model* model, const std::vector<const ggml_tensor*>& tensors,
                   const TestScript& script) {
  const llama_vocab* vocab = llama_model_get_vocab(model);
  llama_token end = llama_vocab_eot(vocab);
  if (end == LLAMA_TOKEN_NULL) end = llama_vocab_eos(vocab);
  const ggml_tensor* embd = Find(tensors, "token_embd.weight");
  const ggml_tensor* head = Find(tensors, "output.weight");
  if (embd == nullptr || head == nullptr) {
    return Status::InvalidArgument("a scripted model needs its own token_embd and output tensors");
  }
  PREFIXD_ASSIGN_OR_RETURN(Table table, BuildTable(vocab, script, end, embd->ne[0]));
  WriteEmbeddings(embd, table);
  WriteHead(head, table);
  return Status::OK();
}

}  // namespace prefixd::engine::test_model
