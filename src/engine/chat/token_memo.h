// TokenMemo: tokenizes a prompt as the pieces between special-token boundaries and remembers
// each piece's tokens, so a growing conversation tokenizes only its new pieces instead of the
// whole context on every request (~100 ms per request at 64K tokens).
//
// Why the pieces give exactly the whole text's tokens: llama.cpp first cuts the text at every
// special-token occurrence (parse_special) and then tokenizes each raw fragment on its own
// (llama_vocab::impl::tokenizer_st_partition, then tokenize()). A cut placed just before an
// occurrence of a special token S is therefore a fragment boundary of the whole text too, when
//   - S has no LSTRIP attribute (it would eat whitespace left of the cut) and does not start
//     with whitespace (an RSTRIP token before it could eat it);
//   - no special token (S included) can overlap the cut from the left: no proper suffix of any
//     special token's text agrees with S's text on their common length (such a token, matched
//     first or leftmost, would claim the text across the cut);
//   - only the first piece gets the BOS, and the vocabulary adds no EOS (else: no memo).
// A piece after a cut starts with S, so SPM's "space after a special token" rule sees the same
// context in both. The memo tests compare against whole-text tokenization on the real
// tokenizers the pinned llama.cpp ships (models/ggml-vocab-*.gguf).
//
// Thread-safety: Tokenize may be called concurrently (one short lock per piece lookup).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model.h"

namespace prefixd::engine {

// The special-token texts a TokenMemo may cut before (see above), among the control tokens
// whose text occurs in `only_in` (a chat template's source: the few turn markers a rendered
// prompt is made of). Empty when the vocabulary adds an EOS.
std::vector<std::string> SafeCutTexts(const Model& model, std::string_view only_in);

class TokenMemo {
 public:
  // REQUIRES: `model` outlives the memo. `max_tokens`: tokens remembered in all (least
  // recently used pieces go first).
  TokenMemo(const Model& model, std::vector<std::string> cut_texts, size_t max_tokens = 8u << 20);
  ~TokenMemo();
  // The memo a model's prompts use: cuts before the turn markers of its chat template (without
  // one: the chat format PrepareText knows, <|im_start|> and <|im_end|>).
  static std::unique_ptr<TokenMemo> ForModel(const Model& model);

  // Equal to model.Tokenize(text, true, allow_bos). Pieces are remembered per `scope` (a
  // tenant's salt): a piece one scope tokenized is a hit for that scope only, so how fast a text
  // tokenizes tells nobody what another tenant sent. `allow_bos` false: a text that continues a
  // prompt (the text after an image, engine/vision/image_prompt.h).
  std::vector<Token> Tokenize(std::string_view text, std::string_view scope = {},
                              bool allow_bos = true) const;

  // Counters, for tests and the bench.
  struct Stats {
    uint64_t pieces = 0;
    uint64_t hits = 0;           // pieces whose tokens were remembered
    uint64_t tokenized_bytes = 0;  // text handed to the tokenizer
  };
  Stats GetStats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::engine
