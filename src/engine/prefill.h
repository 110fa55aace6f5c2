// Plain chunked prefill on one sequence, without the cache: what the state-codec tests use to
// build states with a chosen chunking. The engine's own prefill is Scheduler::PrefillStep.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "engine/context.h"
#include "util/status.h"

namespace prefixd::engine {

// The fewest rows a prefill call should have where it can: ggml's CPU flash attention works
// on tiles of 64 query rows; a call with fewer takes a per-row path several times slower per
// token at long contexts (12% of a 25K-token prefill's time went there).
inline constexpr int32_t kMinCallRows = 64;

// Where the llama_decode call that starts at `pos` ends, for a prefill that must stop at
// `limit` (the prompt's end or the next capture point): one ubatch per call, min(n_batch,
// n_ubatch) tokens, except that a call which would leave a rest under kMinCallRows ends
// earlier, on a multiple of kMinCallRows, so that the rest has kMinCallRows or more.
// As many calls as llama.cpp's own ubatch split makes.
// REQUIRES: pos < limit, n_batch >= 1, n_ubatch >= 1.
int32_t NextChunkEnd(int32_t pos, int32_t limit, uint32_t n_batch, uint32_t n_ubatch);

// Decodes tokens at [pos0, pos0+n) in chunks that end at each of `chunk_ends` (absolute
// positions, ascending, inside (pos0, pos0+n]) and otherwise at n_batch. The last token's
// logits are kept. `on_chunk_end(pos)` runs after each chunk (capture hook; may be empty).
Status Prefill(Context& ctx, int32_t seq, std::span<const Token> tokens, int32_t pos0,
               std::span<const int32_t> chunk_ends = {},
               const std::function<Status(int32_t)>& on_chunk_end = {});

}  // namespace prefixd::engine
