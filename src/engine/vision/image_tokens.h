// The tokens that stand for an image in a prompt. An image of n embeddings occupies n positions
// of Prompt::tokens, each holding a value no vocabulary has (negative, never LLAMA_TOKEN_NULL),
// drawn from the image's identity and the row's index: two prompts share a prefix through an
// image only when every row of it is the same image's same row, so the chain hash of every
// Block that holds image rows covers the image's identity and offset, and a different image of
// the same size stops a match at its first row (a value differs there but with probability
// 2^-30 per row). The cache compares these values as it compares tokens; only the decode
// (prompt_decode.h) and the detokenizer know what they stand for.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/codec/types.h"
#include "util/hash.h"

namespace prefixd::engine {

// Whether `token` stands for an image row (ImageTokens), not a vocabulary token.
inline bool IsImageToken(Token token) { return token < -1; }

// The n values that stand for the rows of the image whose identity is `identity`.
std::vector<Token> ImageTokens(const Digest& identity, int32_t n);

}  // namespace prefixd::engine
