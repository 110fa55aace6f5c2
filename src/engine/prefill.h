// Plain chunked prefill on one sequence, without the cache: what the state-codec tests use to
// build states with a chosen chunking. The engine's own prefill is Scheduler::PrefillStep.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "engine/context.h"
#include "util/status.h"

namespace prefixd::engine {

// Decodes tokens at [pos0, pos0+n) in chunks that end at each of `chunk_ends` (absolute
// positions, ascending, inside (pos0, pos0+n]) and otherwise at n_batch. The last token's
// logits are kept. `on_chunk_end(pos)` runs after each chunk (capture hook; may be empty).
Status Prefill(Context& ctx, int32_t seq, std::span<const Token> tokens, int32_t pos0,
               std::span<const int32_t> chunk_ends = {},
               const std::function<Status(int32_t)>& on_chunk_end = {});

}  // namespace prefixd::engine
