// Plain chunked prefill on one sequence, without the cache: what the state-codec tests use to
// build states with a chosen chunking. The engine's own prefill is Scheduler::PrefillStep.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "engine/context.h"
#include "util/status.h"

namespace prefixd::engine {

// The fewest rows a prefill call should have where it can: ggml's CPU flash attention works
// on tiles of 64 query rows, and a call with fewer reads the whole KV cache for a partial tile
// (before llama.cpp patch 0013 it read it once per row: 12% of a 25K-token prefill's time).
inline constexpr int32_t kMinCallRows = 64;

// Where the llama_decode call that starts at `pos` ends, for a prefill that must stop at
// `limit` (the prompt's end or the next capture point): one ubatch per call, min(n_batch,
// n_ubatch) tokens, except that a call which would leave a rest under kMinCallRows ends
// earlier, on a multiple of kMinCallRows, so that the rest has kMinCallRows or more.
// As many calls as llama.cpp's own ubatch split makes.
// REQUIRES: pos < limit, n_batch >= 1, n_ubatch >= 1.
int32_t NextChunkEnd(int32_t pos, int32_t limit, uint32_t n_batch, uint32_t n_ubatch);

// How ggml's CPU kernels compute a row of a prefill call, by the rows of the call: one row takes
// the one-token paths (flash attention split over the KV cache, matrix-vector products), and
// `tiled_from` rows or more the batched ones (tiled flash attention, matrix products); a kernel
// that batches only from more rows makes the calls between of a third class (kShort). Within a
// class a row's result depends only on the KV cache it attends to, not on the call's other
// rows; across classes it differs in the last bits (docs/architecture.md, "The chunk
// schedule"). The functions below take `tiled_from` as a parameter; the engine's is kTiledFrom.
enum class CallClass { kSingle, kShort, kTiled };
CallClass ClassOf(int32_t rows, int32_t tiled_from);

// The fewest rows a call computes like any longer call, with flash attention or without: 2.
// ggml's CPU flash attention takes its tiled path from 2 query rows (llama.cpp patch 0013; from
// a whole tile of 64 before, with a per-row path below), and the matrix products compute every
// row of a call of 2 or more alike; so no call is of the short class.
inline constexpr int32_t kTiledFrom = 2;

// Where a prompt of n tokens ends prefill calls whatever else happens, for a model whose cache
// takes Snapshots (a state valid at one position only): its capture points (message
// boundaries) and every `spacing` tokens (the boundary Snapshots' grid), except a grid point
// closer than kMinCallRows to a message point or to n: the call between them would take flash
// attention's per-row path, whose every row reads the whole KV cache (at 53K tokens of context
// a 52-row call cost twice a 512-row one), and the message point beside it serves a
// restore as well. Message points closer than that to each other stay (every reusable token
// is restored at them). Ascending, unique, inside (0, n). A pure-attention model needs none:
// its rows are sliced anywhere.
// REQUIRES: spacing >= 1.
std::vector<int32_t> PrefillCuts(int32_t n, std::span<const int32_t> capture_points,
                                 uint32_t spacing);

// For a model whose Snapshots are captured inside a call (Context::CapturesInCall), where no
// capture point ends a call: the furthest point a warm prefill by the schedule `ends` may
// start from so that every call computes its rows in the cold run's class (ResumeChunks): a
// tile before the end when the last call is tiled, else that short call's start (0 for a
// prompt shorter than a tile). A Snapshot nearer the end than this (a chat's tail before its
// generation prompt) serves the longer prompts that extend it, not this one: an exact repeat
// restores a tile or more before its end, so that no prompt's calls are cut short.
// REQUIRES: ends ascending, non-empty.
int32_t ResumeLimit(std::span<const int32_t> ends, int32_t tiled_from);

// The chunk schedule of a prompt of n tokens: the ends of its llama_decode calls, NextChunkEnd
// between consecutive cuts. Ascending, the last is n. With the cache on or off, cold or warm,
// a prompt is prefilled by these calls (a warm run from the first end after its restore point),
// so its logits are those of a cold run with the cache off.
// REQUIRES: n >= 1, `cuts` ascending inside (0, n).
std::vector<int32_t> PlanChunks(int32_t n, std::span<const int32_t> cuts, uint32_t n_batch,
                                uint32_t n_ubatch);

// The end of the call that starts at `pos`: the first of `ends` after it.
// REQUIRES: pos < ends.back().
int32_t NextPlannedEnd(std::span<const int32_t> ends, int32_t pos);

// The schedule a warm prefill from a state at p follows (a Snapshot captured inside a call,
// so p need not be a planned end): the stretch of tiled planned calls from the one that holds p
// up to the next short call (or the prompt's end), tiled anew from p (NextChunkEnd: every call
// tiled, as few as the ubatch allows), then the planned ends after it. A row of a tiled call
// computes as in any other tiled call, and the recurrent ops where Snapshots are captured inside
// calls run token by token, so every row computes as in the cold run; nullopt when p lies in a
// short call or fewer than tiled_from rows before a short one: the first call would be of
// another class. `ends` itself when p is a planned end (or 0).
std::optional<std::vector<int32_t>> ResumeChunks(std::span<const int32_t> ends, int32_t p,
                                                 uint32_t n_batch, uint32_t n_ubatch,
                                                 int32_t tiled_from);

// For a schedule without cuts (pure attention, whose every call of a prompt of `tiled_from`
// or more tokens is tiled): the largest p' <= p from which a warm prefill computes every row as
// a cold run does. The call [p', e) up to the planned end e after p' is of the class of the
// planned call [s, e) it cuts into (p' = s, or as many rows left as that class needs), and the
// rows before p' were computed in tiled calls: 0 below `tiled_from` (they may come from a
// prompt shorter than that). At most tiled_from - 1 before p unless 0.
// REQUIRES: 0 <= p <= ends.back().
int32_t ExactRestoreFloor(std::span<const int32_t> ends, int32_t p, int32_t tiled_from);

// Whether a state taken at `p` by a prompt with the same cuts before p (a Snapshot at a
// capture point) continues by this schedule exactly as a cold run: p is a planned end, or
// cutting the planned call [s, e) there leaves both parts in that call's class.
bool ExactRestorePoint(std::span<const int32_t> ends, int32_t p, int32_t tiled_from);

// Adds `q` to `ends` when ExactRestorePoint(ends, q, tiled_from) (a Snapshot taken there
// restores exactly, and the rows around it compute as without the cut). Returns whether q is
// an end now (the prompt's end is).
bool SplitChunkAt(std::vector<int32_t>& ends, int32_t q, int32_t tiled_from);

// Decodes tokens at [pos0, pos0+n) in chunks that end at each of `chunk_ends` (absolute
// positions, ascending, inside (pos0, pos0+n]) and otherwise at n_batch. The last token's
// logits are kept. `on_chunk_end(pos)` runs after each chunk (capture hook; may be empty).
Status Prefill(Context& ctx, int32_t seq, std::span<const Token> tokens, int32_t pos0,
               std::span<const int32_t> chunk_ends = {},
               const std::function<Status(int32_t)>& on_chunk_end = {});

}  // namespace prefixd::engine
