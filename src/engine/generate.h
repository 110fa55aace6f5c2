// Plain generation on one sequence: prefill a prompt in chunks of at most n_batch tokens,
// then decode token by token. The cache-aware path (engine/engine.h) builds on these steps.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "engine/context.h"
#include "engine/sampler.h"
#include "util/status.h"

namespace prefixd::engine {

// Decodes tokens at [pos0, pos0+n) in chunks that end at each of `chunk_ends` (absolute
// positions, ascending, inside (pos0, pos0+n]) and otherwise at n_batch. The last token's
// logits are kept. `on_chunk_end(pos)` runs after each chunk (capture hook; may be empty).
Status Prefill(Context& ctx, int32_t seq, std::span<const Token> tokens, int32_t pos0,
               std::span<const int32_t> chunk_ends = {},
               const std::function<Status(int32_t)>& on_chunk_end = {});

struct GenerateOptions {
  int max_tokens = 64;
  SamplingOptions sampling;
  // Called with each new token; return false to stop (client gone).
  std::function<bool(Token)> on_token;
};

// Generates from the logits left by the last decode of `seq`, whose next position is `pos`.
// Stops at an end-of-generation token (not included) or max_tokens.
Result<std::vector<Token>> Generate(Context& ctx, int32_t seq, int32_t pos,
                                    const GenerateOptions& options);

}  // namespace prefixd::engine
