// Parsing and re-emitting llama.cpp sequence states (see state_codec.h, docs/state-codec.md).
#include <string>

#include "engine/codec/state_bytes.h"
#include "engine/codec/state_codec.h"

#include <optional>
#include "ggml.h"

namespace prefixd::engine {

namespace {

using internal::ByteReader;
using internal::ByteWriter;
using internal::MulChecked;

bool ValidType(int32_t type) {
  if (type < 0 || type >= GGML_TYPE_COUNT) return false;
  const auto t = static_cast<ggml_type>(type);
  return ggml_type_size(t) > 0 && ggml_blck_size(t) > 0;
}

std::string LayerName(const char* tensor, uint32_t il) {
  return std::string(tensor) + " of layer " + std::to_string(il);
}

// Reads `n_rows` rows of `row_size` bytes into `out`.
Status ReadRows(ByteReader& r, uint64_t n_rows, uint64_t row_size, const std::string& what,
                ByteRange* out) {
  uint64_t n = 0;
  if (!MulChecked(n_rows, row_size, &n)) return r.Error(what + ": data size overflows");
  out->size = size_t(n);
  return r.Skip(n, what.c_str(), &out->offset);
}

Status ReadRowMajor(ByteReader& r, uint32_t n_cells, const std::string& what, KvTensor* t) {
  PREFIXD_RETURN_IF_ERROR(r.Read(&t->type, "tensor type"));
  if (!ValidType(t->type)) return r.Error(what + ": invalid ggml type " + std::to_string(t->type));
  PREFIXD_RETURN_IF_ERROR(r.Read(&t->row_size, "row size"));
  const uint64_t ts = ggml_type_size(static_cast<ggml_type>(t->type));
  if (t->row_size == 0 || t->row_size % ts != 0) {
    return r.Error(what + ": row size " + std::to_string(t->row_size) +
                   " is not a multiple of the type size " + std::to_string(ts));
  }
  return ReadRows(r, n_cells, t->row_size, what, &t->data);
}

Status ReadTransposed(ByteReader& r, uint32_t n_cells, const std::string& what, KvTensor* t) {
  PREFIXD_RETURN_IF_ERROR(r.Read(&t->type, "tensor type"));
  if (!ValidType(t->type)) return r.Error(what + ": invalid ggml type " + std::to_string(t->type));
  PREFIXD_RETURN_IF_ERROR(r.Read(&t->el_size, "element size"));
  PREFIXD_RETURN_IF_ERROR(r.Read(&t->n_embd, "embedding size"));
  const auto type = static_cast<ggml_type>(t->type);
  if (ggml_blck_size(type) != 1 || t->el_size != ggml_type_size(type)) {
    return r.Error(what + ": element size " + std::to_string(t->el_size) + " does not match " +
                   ggml_type_name(type));
  }
  if (t->n_embd == 0) return r.Error(what + ": zero embedding size");
  t->row_size = uint64_t(t->el_size) * t->n_embd;
  return ReadRows(r, n_cells, t->row_size, what, &t->data);
}

Status ReadKvCells(ByteReader& r, uint32_t n_cells, bool cell_ext, KvStream* s) {
  const uint64_t min_cell = 8 + (cell_ext ? 12 : 0);
  if (uint64_t(n_cells) * min_cell > r.remaining()) {
    return r.Error("cell count " + std::to_string(n_cells) + " exceeds the remaining bytes");
  }
  s->cells.resize(n_cells);
  for (KvCell& c : s->cells) {
    PREFIXD_RETURN_IF_ERROR(r.Read(&c.pos, "cell pos"));
    PREFIXD_RETURN_IF_ERROR(r.Read(&c.n_seq_id, "cell n_seq_id"));
    if (cell_ext) PREFIXD_RETURN_IF_ERROR(r.Read(&c.ext, "cell ext"));
    if (uint64_t(c.n_seq_id) * 4 > r.remaining()) {
      return r.Error("cell n_seq_id " + std::to_string(c.n_seq_id) + " exceeds the remaining bytes");
    }
    c.seq_id_begin = uint32_t(s->seq_ids.size());
    for (uint32_t j = 0; j < c.n_seq_id; ++j) {
      int32_t id = 0;
      PREFIXD_RETURN_IF_ERROR(r.Read(&id, "cell seq id"));
      s->seq_ids.push_back(id);
    }
  }
  return Status::OK();
}

Status ReadKvLayers(ByteReader& r, uint32_t n_cells, bool has_v, KvStream* s) {
  uint32_t v_trans = 0, n_layer = 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&v_trans, "v_trans"));
  if (v_trans > 1) return r.Error("v_trans is " + std::to_string(v_trans));
  s->v_trans = v_trans == 1;
  PREFIXD_RETURN_IF_ERROR(r.Read(&n_layer, "n_layer"));
  if (uint64_t(n_layer) * 2 * 12 > r.remaining()) {
    return r.Error("layer count " + std::to_string(n_layer) + " exceeds the remaining bytes");
  }
  s->k.resize(n_layer);
  s->v.resize(has_v ? n_layer : 0);  // an MLA cache writes no V (llama_kv_cache: v == nullptr)
  for (uint32_t il = 0; il < n_layer; ++il) {
    PREFIXD_RETURN_IF_ERROR(ReadRowMajor(r, n_cells, LayerName("K", il), &s->k[il]));
  }
  for (uint32_t il = 0; il < s->v.size(); ++il) {
    const std::string what = LayerName("V", il);
    PREFIXD_RETURN_IF_ERROR(s->v_trans ? ReadTransposed(r, n_cells, what, &s->v[il])
                                       : ReadRowMajor(r, n_cells, what, &s->v[il]));
  }
  return Status::OK();
}

Status ReadKvSection(ByteReader& r, bool cell_ext, bool has_v, KvSection* kv) {
  kv->cell_ext = cell_ext;
  kv->has_v = has_v;
  kv->bytes.offset = r.offset();
  uint32_t n_stream = 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&n_stream, "n_stream"));
  if (n_stream == 0 || uint64_t(n_stream) * 4 > r.remaining()) {
    return r.Error("stream count " + std::to_string(n_stream) + " is impossible");
  }
  kv->streams.resize(n_stream);
  for (KvStream& s : kv->streams) {
    uint32_t n_cells = 0;
    PREFIXD_RETURN_IF_ERROR(r.Read(&n_cells, "cell count"));
    if (n_cells == 0) continue;
    PREFIXD_RETURN_IF_ERROR(ReadKvCells(r, n_cells, cell_ext, &s));
    PREFIXD_RETURN_IF_ERROR(ReadKvLayers(r, n_cells, has_v, &s));
  }
  kv->bytes.size = r.offset() - kv->bytes.offset;
  return Status::OK();
}

// The recurrent section is always the last one: its tensors run to the end of the state.
Status ReadRecurrentSection(ByteReader& r, RecurrentSection* rec) {
  rec->bytes.offset = r.offset();
  uint32_t n_cells = 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&n_cells, "recurrent cell count"));
  if (uint64_t(n_cells) * 8 > r.remaining()) {
    return r.Error("recurrent cell count " + std::to_string(n_cells) +
                   " exceeds the remaining bytes");
  }
  rec->cell_pos.resize(n_cells);
  rec->cell_n_seq_id.resize(n_cells);
  for (uint32_t i = 0; i < n_cells; ++i) {
    PREFIXD_RETURN_IF_ERROR(r.Read(&rec->cell_pos[i], "recurrent cell pos"));
    PREFIXD_RETURN_IF_ERROR(r.Read(&rec->cell_n_seq_id[i], "recurrent cell n_seq_id"));
    if (uint64_t(rec->cell_n_seq_id[i]) * 4 > r.remaining()) {
      return r.Error("recurrent cell n_seq_id exceeds the remaining bytes");
    }
    for (uint32_t j = 0; j < rec->cell_n_seq_id[i]; ++j) {
      int32_t id = 0;
      PREFIXD_RETURN_IF_ERROR(r.Read(&id, "recurrent cell seq id"));
      rec->seq_ids.push_back(id);
    }
  }
  PREFIXD_RETURN_IF_ERROR(r.Read(&rec->s_trans, "recurrent s_trans"));
  if (rec->s_trans != 0) return r.Error("recurrent s_trans is " + std::to_string(rec->s_trans));
  PREFIXD_RETURN_IF_ERROR(r.Read(&rec->n_layer, "recurrent n_layer"));
  if (rec->n_layer == 0) return r.Error("recurrent section has no layers");
  rec->tensors.size = r.remaining();
  PREFIXD_RETURN_IF_ERROR(r.Skip(rec->tensors.size, "recurrent tensors", &rec->tensors.offset));
  if (rec->tensors.size == 0) return r.Error("recurrent section has no tensors");
  rec->bytes.size = r.offset() - rec->bytes.offset;
  return Status::OK();
}

bool HasSwa(MemoryLayout l) {
  return l == MemoryLayout::kIswa || l == MemoryLayout::kHybridIswa || l == MemoryLayout::kDsaIswa;
}
bool HasRecurrent(MemoryLayout l) {
  return l == MemoryLayout::kHybrid || l == MemoryLayout::kHybridIswa ||
         l == MemoryLayout::kRecurrent || l == MemoryLayout::kHybridIdx;
}

// The bytes of the kHybridIdx index section, which follows the recurrent section (whose
// tensors do not say where they end): it mirrors the base section's cells, has the base's
// layer count, and rows of index_key_length elements of the base's K type (llama.cpp's
// llama_memory_hybrid_idx builds it with the attention filter and type_k).
Result<uint64_t> IndexSectionSize(const KvSection& kv, const StateFormat& f) {
  uint64_t n = 4 + 4 * uint64_t(kv.streams.size());
  for (const KvStream& s : kv.streams) {
    if (s.cells.empty()) continue;
    if (s.k.empty()) return Status::Corruption("state: index cache without attention layers");
    const auto type = static_cast<ggml_type>(s.k[0].type);
    if (f.index_key_length == 0 || f.index_key_length % ggml_blck_size(type) != 0) {
      return Status::Corruption("state: index key length does not fit the K type");
    }
    const uint64_t row = ggml_row_size(type, f.index_key_length);
    n += uint64_t(s.cells.size()) * (8 + (f.index_cell_ext ? 12 : 0)) + 4 * s.seq_ids.size();
    n += 8 + uint64_t(s.k.size()) * (12 + s.cells.size() * row);
  }
  return n;
}

// The index cache holds the base cache's positions, stream for stream, cell for cell.
Status CheckIndexMirrorsBase(const KvSection& kv, const KvSection& idx) {
  if (idx.streams.size() != kv.streams.size()) {
    return Status::Corruption("state: index section has another stream count");
  }
  for (size_t s = 0; s < kv.streams.size(); ++s) {
    const auto& a = kv.streams[s].cells;
    const auto& b = idx.streams[s].cells;
    if (a.size() != b.size()) return Status::Corruption("state: index and base cell counts differ");
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].pos != b[i].pos) {
        return Status::Corruption("state: index cell " + std::to_string(i) + " holds position " +
                                  std::to_string(b[i].pos) + ", the base " +
                                  std::to_string(a[i].pos));
      }
    }
  }
  return Status::OK();
}

// kHybridIdx: the recurrent section ends where the index section (of a size known from the
// base section and the format) begins.
Status ReadRecurrentThenIndex(ByteReader& r, std::span<const uint8_t> bytes, const StateFormat& f,
                              ParsedState* out) {
  PREFIXD_ASSIGN_OR_RETURN(uint64_t idx_size, IndexSectionSize(out->kv, f));
  if (idx_size > r.remaining()) return r.Error("index section truncated");
  ByteReader rec(bytes.first(bytes.size() - size_t(idx_size)), "state");
  rec.Seek(r.offset());
  PREFIXD_RETURN_IF_ERROR(ReadRecurrentSection(rec, &out->recurrent));
  r.Seek(rec.offset());
  out->has_index = true;
  PREFIXD_RETURN_IF_ERROR(ReadKvSection(r, f.index_cell_ext, f.index_has_v, &out->index));
  return CheckIndexMirrorsBase(out->kv, out->index);
}

// Parses the header and the sections after it; `partial_only` for GetState(kPartial) bytes.
Status ParseWith(std::span<const uint8_t> bytes, const StateFormat& f, bool partial_only,
                 ParsedState* out) {
  const MemoryLayout layout = f.layout;
  *out = ParsedState{};
  out->bytes = bytes;
  out->layout = layout;
  if (!LayoutIsSliceable(layout)) {
    return Status::NotSupported(std::string("state: the codec does not read ") +
                                MemoryLayoutName(layout) + " states");
  }
  ByteReader r(bytes, partial_only ? "partial state" : "state");
  uint32_t magic = 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kSeqStateMagic) return r.Error("bad magic " + std::to_string(magic));
  PREFIXD_RETURN_IF_ERROR(r.Read(&out->seq_id, "seq id"));
  out->has_rows = !partial_only && LayoutHasRows(layout);
  if (out->has_rows) PREFIXD_RETURN_IF_ERROR(ReadKvSection(r, f.cell_ext, f.kv_has_v, &out->kv));
  const bool index_first = !partial_only && LayoutHasIndex(layout) &&
                           layout != MemoryLayout::kHybridIdx;
  if (index_first) {
    out->has_index = true;
    PREFIXD_RETURN_IF_ERROR(ReadKvSection(r, f.index_cell_ext, f.index_has_v, &out->index));
    PREFIXD_RETURN_IF_ERROR(CheckIndexMirrorsBase(out->kv, out->index));
  }
  out->partial.offset = r.offset();
  out->has_swa = HasSwa(layout);
  if (out->has_swa) PREFIXD_RETURN_IF_ERROR(ReadKvSection(r, f.cell_ext, f.kv_has_v, &out->swa));
  out->has_recurrent = HasRecurrent(layout);
  if (out->has_recurrent && !partial_only && layout == MemoryLayout::kHybridIdx) {
    PREFIXD_RETURN_IF_ERROR(ReadRecurrentThenIndex(r, bytes, f, out));
    out->partial.size = out->recurrent.bytes.size;
  } else {
    if (out->has_recurrent) PREFIXD_RETURN_IF_ERROR(ReadRecurrentSection(r, &out->recurrent));
    out->partial.size = r.offset() - out->partial.offset;
  }
  if (!r.at_end()) return r.Error(std::to_string(r.remaining()) + " trailing bytes");
  return Status::OK();
}

bool AnyCells(const KvSection& kv) {
  for (const KvStream& s : kv.streams) {
    if (!s.cells.empty()) return true;
  }
  return false;
}

// The 12-byte cell ext is not flagged in the bytes: without the model's word, parse both ways
// and require exactly one to fit (each parse checks every type, row size and the exact end).
Result<ParsedState> Parse(std::span<const uint8_t> bytes, StateFormat f, bool partial_only,
                          std::optional<bool> cell_ext) {
  if (cell_ext.has_value()) {  // known from the model: parse once
    f.cell_ext = f.index_cell_ext = *cell_ext;
    ParsedState known;
    PREFIXD_RETURN_IF_ERROR(ParseWith(bytes, f, partial_only, &known));
    return known;
  }
  ParsedState plain;
  f.cell_ext = f.index_cell_ext = false;
  Status st = ParseWith(bytes, f, partial_only, &plain);
  const bool has_kv = (partial_only ? false : LayoutHasRows(f.layout)) || HasSwa(f.layout);
  if (!has_kv || !LayoutIsSliceable(f.layout)) {
    if (!st.ok()) return st;
    return plain;
  }
  if (st.ok() && !AnyCells(plain.kv) && !AnyCells(plain.swa)) return plain;
  ParsedState ext;
  f.cell_ext = f.index_cell_ext = true;
  Status st_ext = ParseWith(bytes, f, partial_only, &ext);
  if (st.ok() && st_ext.ok()) {
    return Status::Corruption("state: ambiguous cell layout (parses with and without cell ext)");
  }
  if (st.ok()) return plain;
  if (st_ext.ok()) return ext;
  return st;
}

StateFormat FormatOf(MemoryLayout layout) {
  StateFormat f;
  f.layout = layout;
  return f;
}

void EmitKvSection(const ParsedState& ps, const KvSection& kv, ByteWriter& w) {
  w.Put(uint32_t(kv.streams.size()));
  for (const KvStream& s : kv.streams) {
    w.Put(uint32_t(s.cells.size()));
    if (s.cells.empty()) continue;
    for (const KvCell& c : s.cells) {
      w.Put(c.pos);
      w.Put(c.n_seq_id);
      if (kv.cell_ext) w.Put(c.ext);
      for (uint32_t j = 0; j < c.n_seq_id; ++j) w.Put(s.seq_ids[c.seq_id_begin + j]);
    }
    w.Put(uint32_t(s.v_trans ? 1 : 0));
    w.Put(uint32_t(s.k.size()));  // V follows for every layer, or for none (MLA)
    for (const KvTensor& t : s.k) {
      w.Put(t.type);
      w.Put(t.row_size);
      w.Append(ps.bytes.subspan(t.data.offset, t.data.size));
    }
    for (const KvTensor& t : s.v) {
      w.Put(t.type);
      if (s.v_trans) {
        w.Put(t.el_size);
        w.Put(t.n_embd);
      } else {
        w.Put(t.row_size);
      }
      w.Append(ps.bytes.subspan(t.data.offset, t.data.size));
    }
  }
}

void EmitRecurrentSection(const ParsedState& ps, const RecurrentSection& rec, ByteWriter& w) {
  w.Put(uint32_t(rec.cell_pos.size()));
  size_t next_id = 0;
  for (size_t i = 0; i < rec.cell_pos.size(); ++i) {
    w.Put(rec.cell_pos[i]);
    w.Put(rec.cell_n_seq_id[i]);
    for (uint32_t j = 0; j < rec.cell_n_seq_id[i]; ++j) w.Put(rec.seq_ids[next_id++]);
  }
  w.Put(rec.s_trans);
  w.Put(rec.n_layer);
  w.Append(ps.bytes.subspan(rec.tensors.offset, rec.tensors.size));
}

bool InBytes(const ParsedState& ps, const ByteRange& r) {
  return r.offset <= ps.bytes.size() && r.size <= ps.bytes.size() - r.offset;
}

// Checks what EmitState indexes with, so a hand-edited ParsedState cannot make it read wild.
Status CheckEmittable(const ParsedState& ps) {
  auto check_kv = [&](const KvSection& kv) -> Status {
    for (const KvStream& s : kv.streams) {
      if (s.cells.empty()) continue;
      if (s.v.size() != (kv.has_v ? s.k.size() : 0)) {
        return Status::InvalidArgument("emit: K/V layer count differs");
      }
      for (const KvCell& c : s.cells) {
        if (uint64_t(c.seq_id_begin) + c.n_seq_id > s.seq_ids.size()) {
          return Status::InvalidArgument("emit: cell seq ids out of range");
        }
      }
      for (const auto* ts : {&s.k, &s.v}) {
        for (const KvTensor& t : *ts) {
          if (!InBytes(ps, t.data)) return Status::InvalidArgument("emit: tensor out of range");
        }
      }
    }
    return Status::OK();
  };
  if (ps.has_rows) PREFIXD_RETURN_IF_ERROR(check_kv(ps.kv));
  if (ps.has_index) PREFIXD_RETURN_IF_ERROR(check_kv(ps.index));
  if (ps.has_swa) PREFIXD_RETURN_IF_ERROR(check_kv(ps.swa));
  if (ps.has_recurrent) {
    const RecurrentSection& rec = ps.recurrent;
    uint64_t n_ids = 0;
    for (uint32_t n : rec.cell_n_seq_id) n_ids += n;
    if (rec.cell_n_seq_id.size() != rec.cell_pos.size() || n_ids != rec.seq_ids.size() ||
        !InBytes(ps, rec.tensors)) {
      return Status::InvalidArgument("emit: inconsistent recurrent section");
    }
  }
  return Status::OK();
}

}  // namespace

Result<ParsedState> ParseState(std::span<const uint8_t> bytes, MemoryLayout layout,
                               std::optional<bool> cell_ext) {
  return Parse(bytes, FormatOf(layout), /*partial_only=*/false, cell_ext);
}

namespace {
// The model's format says everything (cell ext included): parse once.
Result<ParsedState> ParseKnown(std::span<const uint8_t> bytes, const StateFormat& f,
                               bool partial_only) {
  ParsedState out;
  PREFIXD_RETURN_IF_ERROR(ParseWith(bytes, f, partial_only, &out));
  return out;
}
}  // namespace

Result<ParsedState> ParseState(std::span<const uint8_t> bytes, const StateFormat& format) {
  return ParseKnown(bytes, format, /*partial_only=*/false);
}

Result<ParsedState> ParsePartialState(std::span<const uint8_t> bytes, const StateFormat& format) {
  if (!LayoutNeedsSnapshot(format.layout)) {
    return Status::InvalidArgument(std::string("a ") + MemoryLayoutName(format.layout) +
                                   " layout has no partial section");
  }
  return ParseKnown(bytes, format, /*partial_only=*/format.layout != MemoryLayout::kRecurrent);
}

Result<ParsedState> ParsePartialState(std::span<const uint8_t> bytes, MemoryLayout layout,
                                      std::optional<bool> cell_ext) {
  if (!LayoutNeedsSnapshot(layout)) {
    return Status::InvalidArgument(std::string("a ") + MemoryLayoutName(layout) +
                                   " layout has no partial section");
  }
  return Parse(bytes, FormatOf(layout), /*partial_only=*/layout != MemoryLayout::kRecurrent,
               cell_ext);
}

Result<std::vector<uint8_t>> EmitState(const ParsedState& ps) {
  PREFIXD_RETURN_IF_ERROR(CheckEmittable(ps));
  std::vector<uint8_t> out;
  out.reserve(ps.bytes.size());
  ByteWriter w(&out);
  w.Put(kSeqStateMagic);
  w.Put(ps.seq_id);
  const bool index_last = ps.layout == MemoryLayout::kHybridIdx;
  if (ps.has_rows) EmitKvSection(ps, ps.kv, w);
  if (ps.has_index && !index_last) EmitKvSection(ps, ps.index, w);
  if (ps.has_swa) EmitKvSection(ps, ps.swa, w);
  if (ps.has_recurrent) EmitRecurrentSection(ps, ps.recurrent, w);
  if (ps.has_index && index_last) EmitKvSection(ps, ps.index, w);
  return out;
}

}  // namespace prefixd::engine
