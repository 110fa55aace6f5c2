// The state-codec probe: before the cache trusts the codec with a model, prove on that model
// and context that what the codec cuts and assembles is exactly what llama.cpp writes.
#pragma once

#include <optional>
#include <string>

#include "engine/context.h"
#include "engine/codec/state_codec.h"
#include "engine/codec/types.h"

namespace prefixd::engine {

struct CodecProbe {
  StateMode mode = StateMode::kSliced;
  std::optional<StateShape> shape;  // set for kSliced
  std::string why_whole;            // for kWhole: what the sliced probe refused
  // Whether the last logits of a prompt decoded in one chunk and in two are bit-identical. When
  // not, llama.cpp's graph for this model and settings depends on how a prefill is cut (flash
  // attention on CPU tiles micro-batches of more than 32 rows), so a restored prefix —
  // prefilled in other chunks — can change greedy output in the last bits. Correct states,
  // but not a cold run's exact output.
  bool chunking_invariant = true;
  bool chunking_measured = false;  // false: the check failed to run (then no note) or was given
};

// Runs once at start, on the context's owning thread, using the (empty) sequence `seq`, which
// it leaves empty. Decodes five tokens in two chunks and checks, at both chunk ends (3 and 5):
// a state assembled from the rows the codec cut and the partial taken there is byte-identical
// to llama.cpp's whole state; the partial passes CheckPartialState with one shape learned from
// the state (so a section whose size moves with the position is caught); a ranged read slices
// the same rows as a whole one; and (layouts with rows and a partial) setting the partial taken
// at 3 into a sequence holding the rows of [0, 5) and cutting it at 3 gives the state at 3.
// Any refusal gives kWhole with the reason (the caller logs it): each Snapshot is then a whole
// state, whose round trip is checked too. `force_whole` skips the sliced probe.
// Then checks chunking invariance (64 tokens: one chunk, then 37 + 27) unless
// `known_chunking_invariant` gives the answer an earlier start found (ChunkingMemo).
// Returns an error only when not even whole states round-trip (the cache cannot be used).
struct ProbeOptions {
  bool force_whole = false;
  std::optional<bool> known_chunking_invariant;
};
Result<CodecProbe> ProbeStateCodec(Context& ctx, int32_t seq, const ProbeOptions& options);
inline Result<CodecProbe> ProbeStateCodec(Context& ctx, int32_t seq, bool force_whole) {
  return ProbeStateCodec(ctx, seq, ProbeOptions{force_whole, std::nullopt});
}

}  // namespace prefixd::engine
