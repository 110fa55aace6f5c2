// Parsing and re-emitting llama.cpp sequence states (see state_codec.h, docs/state-codec.md).
#include <string>

#include "engine/state_bytes.h"
#include "engine/state_codec.h"

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

Status ReadKvLayers(ByteReader& r, uint32_t n_cells, KvStream* s) {
  uint32_t v_trans = 0, n_layer = 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&v_trans, "v_trans"));
  if (v_trans > 1) return r.Error("v_trans is " + std::to_string(v_trans));
  s->v_trans = v_trans == 1;
  PREFIXD_RETURN_IF_ERROR(r.Read(&n_layer, "n_layer"));
  if (uint64_t(n_layer) * 2 * 12 > r.remaining()) {
    return r.Error("layer count " + std::to_string(n_layer) + " exceeds the remaining bytes");
  }
  s->k.resize(n_layer);
  s->v.resize(n_layer);  // every layer has V (MLA caches without V are not supported)
  for (uint32_t il = 0; il < n_layer; ++il) {
    PREFIXD_RETURN_IF_ERROR(ReadRowMajor(r, n_cells, LayerName("K", il), &s->k[il]));
  }
  for (uint32_t il = 0; il < n_layer; ++il) {
    const std::string what = LayerName("V", il);
    PREFIXD_RETURN_IF_ERROR(s->v_trans ? ReadTransposed(r, n_cells, what, &s->v[il])
                                       : ReadRowMajor(r, n_cells, what, &s->v[il]));
  }
  return Status::OK();
}

Status ReadKvSection(ByteReader& r, bool cell_ext, KvSection* kv) {
  kv->cell_ext = cell_ext;
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
    PREFIXD_RETURN_IF_ERROR(ReadKvLayers(r, n_cells, &s));
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

bool HasSwa(MemoryLayout l) { return l == MemoryLayout::kIswa || l == MemoryLayout::kHybridIswa; }
bool HasRecurrent(MemoryLayout l) {
  return l == MemoryLayout::kHybrid || l == MemoryLayout::kHybridIswa ||
         l == MemoryLayout::kRecurrent;
}

// Parses the header and the sections after it; `partial_only` for GetState(kPartial) bytes.
Status ParseWith(std::span<const uint8_t> bytes, MemoryLayout layout, bool partial_only,
                 bool cell_ext, ParsedState* out) {
  *out = ParsedState{};
  out->bytes = bytes;
  out->layout = layout;
  ByteReader r(bytes, partial_only ? "partial state" : "state");
  uint32_t magic = 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kSeqStateMagic) return r.Error("bad magic " + std::to_string(magic));
  PREFIXD_RETURN_IF_ERROR(r.Read(&out->seq_id, "seq id"));
  out->has_rows = !partial_only && LayoutHasRows(layout);
  if (out->has_rows) PREFIXD_RETURN_IF_ERROR(ReadKvSection(r, cell_ext, &out->kv));
  out->partial.offset = r.offset();
  out->has_swa = HasSwa(layout);
  if (out->has_swa) PREFIXD_RETURN_IF_ERROR(ReadKvSection(r, cell_ext, &out->swa));
  out->has_recurrent = HasRecurrent(layout);
  if (out->has_recurrent) PREFIXD_RETURN_IF_ERROR(ReadRecurrentSection(r, &out->recurrent));
  if (!r.at_end()) return r.Error(std::to_string(r.remaining()) + " trailing bytes");
  out->partial.size = r.offset() - out->partial.offset;
  return Status::OK();
}

bool AnyCells(const KvSection& kv) {
  for (const KvStream& s : kv.streams) {
    if (!s.cells.empty()) return true;
  }
  return false;
}

// The 12-byte cell ext is not flagged in the bytes: parse both ways and require exactly one to
// fit (each parse checks every type, row size and the exact end of the state).
Result<ParsedState> Parse(std::span<const uint8_t> bytes, MemoryLayout layout, bool partial_only,
                          std::optional<bool> cell_ext) {
  if (cell_ext.has_value()) {  // known from the model: parse once
    ParsedState known;
    PREFIXD_RETURN_IF_ERROR(ParseWith(bytes, layout, partial_only, *cell_ext, &known));
    return known;
  }
  ParsedState plain;
  Status st = ParseWith(bytes, layout, partial_only, false, &plain);
  const bool has_kv = (partial_only ? false : LayoutHasRows(layout)) || HasSwa(layout);
  if (!has_kv) {
    if (!st.ok()) return st;
    return plain;
  }
  if (st.ok() && !AnyCells(plain.kv) && !AnyCells(plain.swa)) return plain;
  ParsedState ext;
  Status st_ext = ParseWith(bytes, layout, partial_only, true, &ext);
  if (st.ok() && st_ext.ok()) {
    return Status::Corruption("state: ambiguous cell layout (parses with and without cell ext)");
  }
  if (st.ok()) return plain;
  if (st_ext.ok()) return ext;
  return st;
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
    w.Put(uint32_t(s.k.size()));
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
      if (s.v.size() != s.k.size()) return Status::InvalidArgument("emit: K/V layer count differs");
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
  return Parse(bytes, layout, /*partial_only=*/false, cell_ext);
}

Result<ParsedState> ParsePartialState(std::span<const uint8_t> bytes, MemoryLayout layout,
                                      std::optional<bool> cell_ext) {
  if (layout == MemoryLayout::kAttention) {
    return Status::InvalidArgument("an attention-only layout has no partial section");
  }
  return Parse(bytes, layout, /*partial_only=*/layout != MemoryLayout::kRecurrent, cell_ext);
}

Result<std::vector<uint8_t>> EmitState(const ParsedState& ps) {
  PREFIXD_RETURN_IF_ERROR(CheckEmittable(ps));
  std::vector<uint8_t> out;
  out.reserve(ps.bytes.size());
  ByteWriter w(&out);
  w.Put(kSeqStateMagic);
  w.Put(ps.seq_id);
  if (ps.has_rows) EmitKvSection(ps, ps.kv, w);
  if (ps.has_swa) EmitKvSection(ps, ps.swa, w);
  if (ps.has_recurrent) EmitRecurrentSection(ps, ps.recurrent, w);
  return out;
}

}  // namespace prefixd::engine
