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

// How ggml's CPU kernels compute a row of a prefill call, by the rows of the call: flash
// attention takes its tiled path for kMinCallRows or more rows, its per-row path for fewer, and
// one row takes the one-token paths (flash attention split over the KV cache, matrix-vector
// products). Within a class a row's result depends only on the KV cache it attends to, not on
// the call's other rows; across classes it differs in the last bits (docs/architecture.md,
// "The chunk schedule"). `tiled_from` is TiledFrom(flash attention).
enum class CallClass { kSingle, kShort, kTiled };
CallClass ClassOf(int32_t rows, int32_t tiled_from);

// The fewest rows a call computes like any longer call: kMinCallRows with flash attention;
// without it every call of 2 rows or more computes its rows alike (no kShort).
constexpr int32_t TiledFrom(bool flash_attn) { return flash_attn ? kMinCallRows : 2; }

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

// For a model whose Snapshots are captured inside a call (Context::CapturesInCall): the
// capture points that must still end a call. A warm prefill from a Snapshot at p goes on in
// calls of the class the cold run had only with `tiled_from` rows or more before the next cut
// (ResumeChunks); a point closer than that to the next cut, or to n, is therefore a cut itself,
// taken from the end backwards (a chat's tail before its short generation prompt is one).
// Ascending, unique, inside (0, n).
std::vector<int32_t> CallCaptureCuts(int32_t n, std::span<const int32_t> capture_points,
                                     int32_t tiled_from);

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
