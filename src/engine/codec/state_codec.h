// State codec: takes the bytes of llama_state_seq_get_data apart and puts them back together.
//
// A sequence state (pinned llama.cpp, see docs/state-codec.md) is a header {u32 magic,
// i32 seq_id} followed by the memory's sections:
//   kAttention   kv
//   kIswa        kv(base) kv(swa)
//   kHybrid      kv       recurrent
//   kHybridIswa  kv(base) kv(swa) recurrent
//   kRecurrent   recurrent
//   kDsa, kMsa   kv(base) kv(index)
//   kDsaIswa     kv(base) kv(index) kv(swa)
//   kHybridIdx   kv(base) recurrent kv(index)
//   kDsv4        not read (NotSupported): whole-state snapshots only
// Which one a model has, whether its kv caches hold V (MLA caches hold K only) and whether
// cells carry an ext is not in the bytes: the caller passes the model's StateFormat
// (Model::state_format(), decided at load from the arch and its hyperparameters).
// The attention rows (the base kv section and the index kv section, both one row per position)
// are sliceable by position; the SWA and recurrent sections are the *partial section*: exactly
// what GetState(StatePart::kPartial) returns after its own header (for kAttention, kDsa, kMsa
// and kRecurrent llama.cpp ignores the flag and returns the whole state).
//
// The codec cuts attention rows of a token range into a ROWS PAYLOAD (our own format, see
// docs/state-codec.md) and assembles a whole state from payloads covering [0, P) plus a partial
// taken at exactly P. Every size, count and position is checked: malformed or mismatched input
// gives a Status naming what is wrong, never a crash, an unbounded allocation or a silently
// wrong state. A layout the codec cannot slice gives NotSupported; the caller then keeps
// whole-state snapshots.
//
// Thread-safety: all functions are pure; distinct objects may be used from distinct threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/codec/types.h"
#include "util/status.h"

namespace prefixd::engine {

// The magic llama.cpp writes at the start of every sequence state.
inline constexpr uint32_t kSeqStateMagic = 0xaf143cd8;

// [offset, offset + size) inside ParsedState::bytes.
struct ByteRange {
  size_t offset = 0;
  size_t size = 0;
};

// One cell of a kv section: its position, its sequence ids (a flat slice of
// KvStream::seq_ids) and, when the cache has a cell ext (M-RoPE or PLE), the 12-byte ext.
struct KvCell {
  int32_t pos = 0;
  uint32_t n_seq_id = 0;
  uint32_t seq_id_begin = 0;  // index into KvStream::seq_ids
  std::array<int32_t, 3> ext = {0, 0, 0};  // {x, y, tok}; only when KvSection::cell_ext
};

// One layer's K or V tensor in a stream. Row-major (K, and V when !v_trans): `row_size` bytes
// per cell, `data` = n_cells rows. Transposed V: `el_size` bytes per element, `n_embd` rows of
// el_size * n_cells bytes each; row_size is then el_size * n_embd (bytes per cell).
struct KvTensor {
  int32_t type = 0;  // ggml_type
  uint64_t row_size = 0;
  uint32_t el_size = 0;  // transposed V only
  uint32_t n_embd = 0;   // transposed V only
  ByteRange data;
};

struct KvStream {
  std::vector<KvCell> cells;  // in the order llama.cpp wrote them (cell index order)
  std::vector<int32_t> seq_ids;
  bool v_trans = false;       // meaningful only when !cells.empty()
  std::vector<KvTensor> k;    // one per layer; empty when the stream has no cells
  std::vector<KvTensor> v;
};

// A kv-cache section: u32 n_stream, then per stream its cells and layers.
struct KvSection {
  bool cell_ext = false;
  bool has_v = true;  // false for MLA caches (K only): every stream's `v` is empty
  std::vector<KvStream> streams;
  ByteRange bytes;  // the whole section
};

// The recurrent section's cell metadata (its tensors stay opaque: their count depends on
// model hyperparameters the bytes do not carry).
struct RecurrentSection {
  std::vector<int32_t> cell_pos;
  std::vector<uint32_t> cell_n_seq_id;
  std::vector<int32_t> seq_ids;
  uint32_t s_trans = 0;
  uint32_t n_layer = 0;
  ByteRange tensors;  // the opaque per-layer tensors after n_layer, to the end of the state
  ByteRange bytes;    // the whole section, to the end of the state
};

// A parsed state. Borrows `bytes`: the buffer must outlive the ParsedState.
struct ParsedState {
  std::span<const uint8_t> bytes;
  MemoryLayout layout = MemoryLayout::kAttention;
  int32_t seq_id = 0;
  bool has_rows = false;  // true when `kv` holds the attention rows (every layout but kRecurrent)
  KvSection kv;           // attention rows (the base cache for iswa layouts)
  bool has_index = false;
  KvSection index;        // the index cache's rows (LayoutHasIndex), same cells as `kv`
  bool has_swa = false;
  KvSection swa;          // the sliding-window cache (iswa layouts), part of the partial section
  bool has_recurrent = false;
  RecurrentSection recurrent;  // part of the partial section
  ByteRange partial;           // the partial section: the SWA and recurrent sections (empty
                               // when the layout needs no snapshot)
};

// Parses a whole state (GetState(kWhole)) of a model whose memory is `layout`.
// Returns Corruption naming the first inconsistency for malformed bytes.
// `cell_ext`: whether kv cells carry the 12-byte ext (Model::has_cell_ext()). The bytes do
// not say; without the hint both readings are tried and a state that fits both is refused as
// ambiguous, so callers that know the model always pass it.
Result<ParsedState> ParseState(std::span<const uint8_t> bytes, MemoryLayout layout,
                               std::optional<bool> cell_ext = std::nullopt);
// The same with everything the model says about its states; the only way to read MLA caches
// (no V) and kHybridIdx states (the index section's size follows from its key length).
Result<ParsedState> ParseState(std::span<const uint8_t> bytes, const StateFormat& format);

// Parses a partial state (GetState(kPartial)): the header and the partial section only.
// For kAttention (no partial section) this is InvalidArgument.
Result<ParsedState> ParsePartialState(std::span<const uint8_t> bytes, MemoryLayout layout,
                                      std::optional<bool> cell_ext = std::nullopt);
Result<ParsedState> ParsePartialState(std::span<const uint8_t> bytes, const StateFormat& format);

// Writes `state` back; for a state from ParseState the result is byte-identical to its input.
Result<std::vector<uint8_t>> EmitState(const ParsedState& state);

// Per-layer signature of the attention rows.
struct LayerShape {
  int32_t k_type = 0;
  uint64_t k_row_size = 0;
  int32_t v_type = 0;       // kNoV: the cache has no V (MLA)
  uint64_t v_row_size = 0;  // bytes per cell (el_size * n_embd when transposed; 0 without V)
  uint32_t v_el_size = 0;   // transposed V only
  uint32_t v_n_embd = 0;    // transposed V only
  bool operator==(const LayerShape&) const = default;
};

// LayerShape::v_type of a layer without V (an MLA cache).
inline constexpr int32_t kNoV = -1;

// What AssembleState needs to know about a model + context, learned once from a reference
// state with at least one token (StateShapeOf). Part of the cache-layout fingerprint.
struct StateShape {
  MemoryLayout layout = MemoryLayout::kAttention;
  int32_t seq_id = 0;     // written into the header and the cells (llama.cpp ignores both)
  uint32_t n_stream = 1;  // streams per kv section (n_seq with kv_unified=false)
  uint32_t stream = 0;    // the stream the rows are written into
  bool learned = false;   // set by StateShapeOf
  bool cell_ext = false;
  bool v_trans = false;
  bool kv_has_v = true;
  std::vector<LayerShape> layers;      // attention rows
  bool has_index = false;              // LayoutHasIndex: a second row section
  bool index_cell_ext = false;
  bool index_has_v = true;
  bool index_after_partial = false;    // kHybridIdx: written after the recurrent section
  std::vector<LayerShape> index_layers;  // a rows payload holds `layers` then these
  bool swa_v_trans = false;            // iswa layouts
  std::vector<LayerShape> swa_layers;  // iswa layouts
  uint64_t recurrent_bytes = 0;        // size of a one-cell recurrent section (0: none)
  bool swa_has_v = true;
};

// Learns the shape from a parsed state. REQUIRES a state with at least one token (the layer
// signature is only written for non-empty streams). NotSupported when the state cannot be
// sliced (rows in several streams, several recurrent cells, ...).
Result<StateShape> StateShapeOf(const ParsedState& state);

// Cuts the attention rows of [p0, p1) into a rows payload. REQUIRES `state` whose rows are in
// one stream with consecutive positions base..base+Q-1 in cell order and [p0, p1) inside them:
// a whole state (base 0) or a ranged one (Context::GetStateRange, base = its p0); otherwise
// InvalidArgument / NotSupported naming what is wrong.
Result<std::vector<uint8_t>> EncodeRows(const ParsedState& state, int32_t p0, int32_t p1);
// Whether the state's rows are exactly positions [p0, p1), in order (a ranged read of a
// sequence that holds them all, not one that started later).
bool HoldsRowsExactly(const ParsedState& state, int32_t p0, int32_t p1);

// The header of a rows payload, checked against the payload's size.
struct RowsInfo {
  int32_t p0 = 0;
  uint32_t n_tokens = 0;
  bool v_trans = false;
  bool cell_ext = false;
  std::vector<LayerShape> layers;
};
Result<RowsInfo> ReadRowsInfo(std::span<const uint8_t> payload);

// How many bytes at the front of a rows payload AssembleStatePieces parses (header, layer
// table, cell exts) before the rows themselves: what a reader of a payload still in its file
// reads first. `head` holds at least its first kRowsHeadBytes bytes; Corruption for a head
// that is not a rows payload's.
inline constexpr size_t kRowsHeadBytes = 24;
Result<uint64_t> RowsFrontBytes(std::span<const uint8_t> head);

// The first `n_tokens_used` tokens of a rows payload.
struct RowsRef {
  std::span<const uint8_t> payload;
  uint32_t n_tokens_used = 0;
};

// Checks a partial (GetState(kPartial)) against `shape` as AssembleState does: its sections,
// sizes and that it was taken at exactly P (its last position is P - 1). What a restore that
// sets only the partial into a sequence already holding the rows of [0, P) checks first.
Status CheckPartialState(std::span<const uint8_t> partial, const StateShape& shape, int32_t p);

// Assembles whole-state bytes for Context::SetState(seq, bytes, StatePart::kWhole) from rows
// covering [0, P) in order (each payload must start where the previous used part ended; any
// may be used partially) and `partial` = GetState(kPartial) taken at exactly P (empty for
// kAttention). For kRecurrent there are no rows and the partial is returned as is.
// `expected_p` >= 0 additionally requires P == expected_p (the only way to check a kRecurrent
// partial's position). Checks every payload against `shape`, the partial's size and sections,
// and that the partial's last position is P-1; a mismatch is InvalidArgument or Corruption.
Result<std::vector<uint8_t>> AssembleState(std::span<const RowsRef> rows,
                                           std::span<const uint8_t> partial,
                                           const StateShape& shape, int32_t expected_p = -1);
// The same into `out` (cleared first, its capacity kept): a caller that restores often reuses
// one buffer instead of faulting in fresh pages for every state.
Status AssembleStateInto(std::span<const RowsRef> rows, std::span<const uint8_t> partial,
                         const StateShape& shape, int32_t expected_p, std::vector<uint8_t>* out);

// A whole state as pieces in order: their concatenation is exactly what AssembleStateInto
// writes. Large pieces point into the rows payloads and the partial passed to
// AssembleStatePieces (which must outlive the pieces); fixed fields and cell metadata live in
// `headers`. Reused across restores: its buffers keep their capacity.
struct StatePieces {
  std::vector<uint8_t> headers;
  std::vector<std::span<const uint8_t>> pieces;
  size_t size = 0;  // sum of the pieces' sizes
};
// AssembleStateInto without the copy: the same checks, the state as pieces (Context::
// SetStatePieces sets it straight from them). On error `out->pieces` is empty.
Status AssembleStatePieces(std::span<const RowsRef> rows, std::span<const uint8_t> partial,
                           const StateShape& shape, int32_t expected_p, StatePieces* out);

}  // namespace prefixd::engine
