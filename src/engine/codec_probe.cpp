#include "engine/codec_probe.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "engine/model/model.h"

namespace prefixd::engine {

namespace {

constexpr int32_t kCut = 3;  // the first chunk's end
constexpr int32_t kEnd = 5;  // the second chunk's end

using Bytes = std::vector<uint8_t>;

std::array<Token, kEnd> ProbeTokens(const Model& model) {
  std::array<Token, kEnd> t{};
  const Token top = std::max(model.n_vocab() - 1, 0);
  for (int32_t i = 0; i < kEnd; ++i) t[i] = std::min<Token>(Token(i + 1), top);
  return t;
}

Status Same(const Bytes& ours, const Bytes& llama, const std::string& what) {
  if (ours == llama) return Status::OK();
  return Status::NotSupported(what + " differs from llama.cpp's (" + std::to_string(ours.size()) +
                              " vs " + std::to_string(llama.size()) + " bytes)");
}

// What the sequence holds now: its whole state and (when the layout has one) its partial.
struct Taken {
  Bytes whole;
  Bytes partial;
};

Result<Taken> Take(const Context& ctx, int32_t seq) {
  Taken t;
  PREFIXD_ASSIGN_OR_RETURN(t.whole, ctx.GetState(seq, StatePart::kWhole));
  if (LayoutNeedsSnapshot(ctx.model().layout())) {
    PREFIXD_ASSIGN_OR_RETURN(t.partial, ctx.GetState(seq, StatePart::kPartial));
  }
  return t;
}

// Every payload used whole (an unreadable one as 0 tokens: AssembleState refuses it).
std::vector<RowsRef> Refs(const std::vector<Bytes>& rows) {
  std::vector<RowsRef> refs;
  for (const Bytes& r : rows) {
    auto info = ReadRowsInfo(r);
    refs.push_back({r, info.ok() ? info->n_tokens : 0});
  }
  return refs;
}

// Cuts the rows between consecutive `bounds` from a parsed state.
Result<std::vector<Bytes>> Cut(const ParsedState& state, std::span<const int32_t> bounds) {
  std::vector<Bytes> rows;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    PREFIXD_ASSIGN_OR_RETURN(Bytes r, EncodeRows(state, bounds[i], bounds[i + 1]));
    rows.push_back(std::move(r));
  }
  return rows;
}

// Assembles rows + partial at p and compares with llama.cpp's whole state at p.
Status CheckAssembles(const std::vector<Bytes>& rows, const Taken& at, const StateShape& shape,
                      int32_t p) {
  PREFIXD_ASSIGN_OR_RETURN(Bytes ours, AssembleState(Refs(rows), at.partial, shape, p));
  return Same(ours, at.whole, "the state assembled at " + std::to_string(p));
}

Status Decode(Context& ctx, int32_t seq, std::span<const Token> tokens, int32_t p0, int32_t p1) {
  return ctx.DecodeChunk(seq, tokens.subspan(size_t(p0), size_t(p1 - p0)), p0, false);
}

// The sliced probe (see ProbeStateCodec). Leaves `seq` in any state; the caller clears it.
Result<StateShape> ProbeSliced(Context& ctx, int32_t seq, std::span<const Token> tokens) {
  const Model& model = ctx.model();
  const bool rows = LayoutHasRows(model.layout());
  const bool partial = LayoutNeedsSnapshot(model.layout());
  PREFIXD_RETURN_IF_ERROR(Decode(ctx, seq, tokens, 0, kCut));
  PREFIXD_ASSIGN_OR_RETURN(Taken at_cut, Take(ctx, seq));
  PREFIXD_RETURN_IF_ERROR(Decode(ctx, seq, tokens, kCut, kEnd));
  PREFIXD_ASSIGN_OR_RETURN(Taken at_end, Take(ctx, seq));
  PREFIXD_ASSIGN_OR_RETURN(ParsedState end, ParseState(at_end.whole, model.state_format()));
  PREFIXD_ASSIGN_OR_RETURN(ParsedState cut, ParseState(at_cut.whole, model.state_format()));
  PREFIXD_ASSIGN_OR_RETURN(StateShape shape, StateShapeOf(end));
  const std::array<int32_t, 3> end_bounds = {0, kCut, kEnd};
  const std::array<int32_t, 2> cut_bounds = {0, kCut};
  std::vector<Bytes> end_rows, cut_rows;
  if (rows) {
    PREFIXD_ASSIGN_OR_RETURN(end_rows, Cut(end, end_bounds));
    PREFIXD_ASSIGN_OR_RETURN(cut_rows, Cut(cut, cut_bounds));
  }
  PREFIXD_RETURN_IF_ERROR(CheckAssembles(end_rows, at_end, shape, kEnd));
  if (partial) PREFIXD_RETURN_IF_ERROR(CheckPartialState(at_cut.partial, shape, kCut));
  PREFIXD_RETURN_IF_ERROR(CheckAssembles(cut_rows, at_cut, shape, kCut));
  if (rows) {  // a ranged read slices the rows a whole read does
    PREFIXD_ASSIGN_OR_RETURN(Bytes range, ctx.GetStateRange(seq, kCut, kEnd));
    PREFIXD_ASSIGN_OR_RETURN(ParsedState ranged, ParseState(range, model.state_format()));
    PREFIXD_ASSIGN_OR_RETURN(Bytes r, EncodeRows(ranged, kCut, kEnd));
    PREFIXD_RETURN_IF_ERROR(Same(r, end_rows[1], "the rows of a ranged read"));
  }
  if (rows && partial) {  // the partial-only restore: rows of [0, 5) held, partial at 3 set
    PREFIXD_RETURN_IF_ERROR(ctx.SetState(seq, at_cut.partial, StatePart::kPartial));
    if (!ctx.SeqTruncate(seq, kCut)) return Status::NotSupported("cannot cut the held rows");
    PREFIXD_ASSIGN_OR_RETURN(Bytes now, ctx.GetState(seq, StatePart::kWhole));
    PREFIXD_RETURN_IF_ERROR(Same(now, at_cut.whole, "a partial set over held rows"));
  }
  ctx.SeqClear(seq);
  PREFIXD_ASSIGN_OR_RETURN(Bytes assembled, AssembleState(Refs(end_rows), at_end.partial, shape, kEnd));
  PREFIXD_RETURN_IF_ERROR(ctx.SetState(seq, assembled, StatePart::kWhole));
  if (ctx.SeqPosMax(seq) != kEnd - 1) return Status::NotSupported("an assembled state did not set");
  return shape;
}

// Whole states round-trip: taken, set into a cleared sequence, taken again, the same bytes.
Status ProbeWhole(Context& ctx, int32_t seq, std::span<const Token> tokens) {
  PREFIXD_RETURN_IF_ERROR(Decode(ctx, seq, tokens, 0, kCut));
  PREFIXD_ASSIGN_OR_RETURN(Bytes first, ctx.GetState(seq, StatePart::kWhole));
  ctx.SeqClear(seq);
  PREFIXD_RETURN_IF_ERROR(ctx.SetState(seq, first, StatePart::kWhole));
  if (ctx.SeqPosMax(seq) != kCut - 1) return Status::Internal("a whole state did not set");
  PREFIXD_ASSIGN_OR_RETURN(Bytes again, ctx.GetState(seq, StatePart::kWhole));
  return Same(again, first, "a whole state set and taken again");
}

// The last logits of `tokens` decoded into `seq` in chunks ending at `ends`.
Result<std::vector<float>> LastLogits(Context& ctx, int32_t seq, std::span<const Token> tokens,
                                      std::span<const int32_t> ends) {
  ctx.SeqClear(seq);
  int32_t p0 = 0;
  for (int32_t p1 : ends) {
    const bool last = p1 == int32_t(tokens.size());
    PREFIXD_RETURN_IF_ERROR(ctx.DecodeChunk(seq, tokens.subspan(size_t(p0), size_t(p1 - p0)), p0, last));
    p0 = p1;
  }
  const float* logits = ctx.Logits(-1);
  if (logits == nullptr) return Status::Internal("no logits");
  return std::vector<float>(logits, logits + ctx.model().n_vocab());
}

Result<bool> ChunkingInvariant(Context& ctx, int32_t seq) {
  std::array<Token, 64> tokens{};
  const Token top = std::max(ctx.model().n_vocab() - 1, 0);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::min<Token>(Token(3 * i + 2), top);
  const std::array<int32_t, 1> one = {64};
  const std::array<int32_t, 2> two = {37, 64};
  PREFIXD_ASSIGN_OR_RETURN(std::vector<float> whole, LastLogits(ctx, seq, tokens, one));
  PREFIXD_ASSIGN_OR_RETURN(std::vector<float> split, LastLogits(ctx, seq, tokens, two));
  ctx.SeqClear(seq);
  return std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)) == 0;
}

}  // namespace

Result<CodecProbe> ProbeStateCodec(Context& ctx, int32_t seq, const ProbeOptions& options) {
  const std::array<Token, kEnd> tokens = ProbeTokens(ctx.model());
  CodecProbe probe;
  if (options.known_chunking_invariant) {
    probe.chunking_invariant = *options.known_chunking_invariant;
  } else {
    Result<bool> invariant = ChunkingInvariant(ctx, seq);
    ctx.SeqClear(seq);  // also after a failed decode
    probe.chunking_invariant = !invariant.ok() || *invariant;  // unknown: no note
    probe.chunking_measured = invariant.ok();
  }
  if (options.force_whole) {
    probe.mode = StateMode::kWhole;
    probe.why_whole = "whole-state snapshots were asked for";
  } else {
    ctx.SeqClear(seq);
    Result<StateShape> shape = ProbeSliced(ctx, seq, tokens);
    ctx.SeqClear(seq);
    if (shape.ok()) {
      probe.shape = std::move(shape).value();
      return probe;
    }
    probe.mode = StateMode::kWhole;
    probe.why_whole = shape.status().ToString();
  }
  Status whole = ProbeWhole(ctx, seq, tokens);
  ctx.SeqClear(seq);
  if (!whole.ok()) return Status::NotSupported("whole states do not round-trip: " + whole.ToString());
  return probe;
}

}  // namespace prefixd::engine
