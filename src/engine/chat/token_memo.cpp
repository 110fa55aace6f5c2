#include "engine/chat/token_memo.h"

#include <algorithm>
#include <cctype>
#include <list>
#include <map>

#include "llama.h"
#include "util/hash.h"
#include "util/mutex.h"
#include "util/process_memory.h"

namespace prefixd::engine {

namespace {

struct Special {
  std::string text;
  llama_token_attr attr;
};

// The tokens llama.cpp's partition treats as special (control, user-defined, unknown).
std::vector<Special> SpecialTokens(const llama_vocab* vocab) {
  std::vector<Special> out;
  const int32_t n = llama_vocab_n_tokens(vocab);
  const int kinds = LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED | LLAMA_TOKEN_ATTR_UNKNOWN;
  for (llama_token t = 0; t < n; ++t) {
    const llama_token_attr attr = llama_vocab_get_attr(vocab, t);
    const char* text = llama_vocab_get_text(vocab, t);
    if ((attr & kinds) != 0 && text != nullptr && *text != '\0') out.push_back({text, attr});
  }
  return out;
}

// True when some special token, starting left of a cut before `s`, could run across the cut:
// a proper suffix of its text agrees with s on their common length.
bool OverlapsFromLeft(const std::string& s, const std::vector<Special>& specials) {
  for (const Special& t : specials) {
    for (size_t k = 1; k < t.text.size(); ++k) {
      if (t.text[k] != s[0]) continue;
      const size_t m = std::min(t.text.size() - k, s.size());
      if (t.text.compare(k, m, s, 0, m) == 0) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> SafeCutTexts(const Model& model, std::string_view only_in) {
  const llama_vocab* vocab = model.vocab();
  if (llama_vocab_get_add_eos(vocab)) return {};
  const std::vector<Special> specials = SpecialTokens(vocab);
  std::vector<std::string> cuts;
  for (const Special& s : specials) {
    if ((s.attr & LLAMA_TOKEN_ATTR_CONTROL) == 0 || (s.attr & LLAMA_TOKEN_ATTR_LSTRIP) != 0) continue;
    if (std::isspace(static_cast<unsigned char>(s.text[0]))) continue;
    if (only_in.find(s.text) == std::string_view::npos) continue;
    if (!OverlapsFromLeft(s.text, specials)) cuts.push_back(s.text);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

struct TokenMemo::Impl {
  const Model& model;
  std::vector<std::string> cuts;
  size_t max_tokens;

  // A piece's tokens by (first piece?, SHA-256 of its scope and text), least recently used
  // first.
  using Key = std::pair<bool, Digest>;
  struct Entry {
    std::vector<Token> tokens;
    std::list<Key>::iterator lru;
  };
  mutable Mutex mu;
  mutable std::map<Key, Entry> entries PREFIXD_GUARDED_BY(mu);
  mutable std::list<Key> lru PREFIXD_GUARDED_BY(mu);
  mutable size_t held_tokens PREFIXD_GUARDED_BY(mu) = 0;
  mutable Stats stats PREFIXD_GUARDED_BY(mu);

  Impl(const Model& m, std::vector<std::string> c, size_t max)
      : model(m), cuts(std::move(c)), max_tokens(max) {}
  ~Impl() {
    MutexLock lock(&mu);
    Gauge().Add(-int64_t(HeldBytesLocked()));
  }

  // The memory of every memo, for /metrics: the tokens, and a map node, a list node and the
  // vector's header per piece.
  static MemoryGauge& Gauge() {
    static MemoryGauge g("token_memo");
    return g;
  }
  static constexpr size_t kPieceBytes = sizeof(std::pair<const Key, Entry>) + 32 + sizeof(Key) + 16;
  size_t HeldBytesLocked() const PREFIXD_REQUIRES(mu) {
    return held_tokens * sizeof(Token) + entries.size() * kPieceBytes;
  }

  std::vector<size_t> CutPoints(std::string_view text) const;
  std::vector<Token> Piece(std::string_view piece, bool first, std::string_view scope) const;
  void Remember(const Key& key, const std::vector<Token>& tokens) const PREFIXD_EXCLUDES(mu);
};

// Every occurrence of a cut text, in order (0 excluded: the first piece starts there anyway).
std::vector<size_t> TokenMemo::Impl::CutPoints(std::string_view text) const {
  std::vector<size_t> at;
  for (const std::string& c : cuts) {
    for (size_t p = text.find(c, 1); p != std::string_view::npos; p = text.find(c, p + 1)) {
      at.push_back(p);
    }
  }
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  return at;
}

std::vector<Token> TokenMemo::Impl::Piece(std::string_view piece, bool first,
                                          std::string_view scope) const {
  Sha256 h;
  h.UpdateU64(scope.size());
  h.Update(scope);
  h.Update(piece);
  const Key key{first, h.Finish()};
  {
    MutexLock lock(&mu);
    ++stats.pieces;
    auto it = entries.find(key);
    if (it != entries.end()) {
      ++stats.hits;
      lru.splice(lru.end(), lru, it->second.lru);
      return it->second.tokens;
    }
    stats.tokenized_bytes += piece.size();
  }
  std::vector<Token> tokens = model.Tokenize(piece, /*parse_special=*/true, /*allow_bos=*/first);
  Remember(key, tokens);
  return tokens;
}

void TokenMemo::Impl::Remember(const Key& key, const std::vector<Token>& tokens) const {
  if (tokens.size() > max_tokens) return;
  MutexLock lock(&mu);
  if (entries.count(key) != 0) return;
  const size_t before = HeldBytesLocked();
  lru.push_back(key);
  entries.emplace(key, Entry{tokens, std::prev(lru.end())});
  held_tokens += tokens.size();
  while (held_tokens > max_tokens && !lru.empty()) {
    auto it = entries.find(lru.front());
    held_tokens -= it->second.tokens.size();
    entries.erase(it);
    lru.pop_front();
  }
  Gauge().Add(int64_t(HeldBytesLocked()) - int64_t(before));
}

TokenMemo::TokenMemo(const Model& model, std::vector<std::string> cut_texts, size_t max_tokens)
    : impl_(std::make_unique<Impl>(model, std::move(cut_texts), max_tokens)) {}
TokenMemo::~TokenMemo() = default;

std::unique_ptr<TokenMemo> TokenMemo::ForModel(const Model& model) {
  std::string markers = model.ChatTemplate();
  if (markers.empty()) markers = "<|im_start|><|im_end|>";
  return std::make_unique<TokenMemo>(model, SafeCutTexts(model, markers));
}

std::vector<Token> TokenMemo::Tokenize(std::string_view text, std::string_view scope,
                                       bool allow_bos) const {
  if (impl_->cuts.empty()) return impl_->model.Tokenize(text, true, allow_bos);
  std::vector<Token> out;
  size_t begin = 0;
  std::vector<size_t> cuts = impl_->CutPoints(text);
  cuts.push_back(text.size());
  for (size_t end : cuts) {
    std::vector<Token> piece =
        impl_->Piece(text.substr(begin, end - begin), allow_bos && begin == 0, scope);
    out.insert(out.end(), piece.begin(), piece.end());
    begin = end;
  }
  return out;
}

TokenMemo::Stats TokenMemo::GetStats() const {
  MutexLock lock(&impl_->mu);
  return impl_->stats;
}

}  // namespace prefixd::engine
