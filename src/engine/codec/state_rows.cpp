// Rows payloads: cutting attention rows out of a parsed state and assembling a whole state from
// payloads plus a partial (see state_codec.h; the format is in docs/state-codec.md).
#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "engine/codec/state_bytes.h"
#include "engine/codec/state_codec.h"
#include "ggml.h"
#include "util/buffer_pool.h"
#include "util/memcopy.h"

namespace prefixd::engine {

namespace {

using internal::ByteReader;
using internal::ByteWriter;
using internal::MulChecked;

constexpr uint32_t kRowsMagic = 0x57525850;  // "PXRW"
constexpr uint16_t kRowsVersion = 1;
constexpr uint16_t kFlagVTrans = 1;
constexpr uint16_t kFlagCellExt = 2;
constexpr size_t kRowsHeaderSize = 24;
constexpr size_t kRowsLayerSize = 32;
constexpr size_t kCellExtSize = 12;

std::string Str(uint64_t v) { return std::to_string(v); }

// Where each part of a payload starts, from its header.
struct RowsOffsets {
  size_t ext = 0;
  std::vector<size_t> k, v;
  size_t end = 0;
};

// Computes the offsets; false when a size overflows.
bool ComputeOffsets(const RowsInfo& info, RowsOffsets* o) {
  uint64_t off = kRowsHeaderSize + kRowsLayerSize * uint64_t(info.layers.size());
  uint64_t n = 0;
  o->ext = size_t(off);
  if (info.cell_ext) off += kCellExtSize * uint64_t(info.n_tokens);
  o->k.resize(info.layers.size());
  o->v.resize(info.layers.size());
  for (size_t il = 0; il < info.layers.size(); ++il) {
    o->k[il] = size_t(off);
    if (!MulChecked(info.n_tokens, info.layers[il].k_row_size, &n) || off + n < off) return false;
    off += n;
  }
  for (size_t il = 0; il < info.layers.size(); ++il) {
    o->v[il] = size_t(off);
    if (!MulChecked(info.n_tokens, info.layers[il].v_row_size, &n) || off + n < off) return false;
    off += n;
  }
  o->end = size_t(off);
  return true;
}

bool ValidType(int32_t type) {
  if (type < 0 || type >= GGML_TYPE_COUNT) return false;
  const auto t = static_cast<ggml_type>(type);
  return ggml_type_size(t) > 0 && ggml_blck_size(t) > 0;
}

Status CheckLayerShape(const LayerShape& l, bool v_trans, size_t il) {
  const std::string where = "rows payload: layer " + std::to_string(il);
  if (!ValidType(l.k_type)) return Status::Corruption(where + ": bad K type");
  const uint64_t k_ts = ggml_type_size(static_cast<ggml_type>(l.k_type));
  if (l.k_row_size == 0 || l.k_row_size % k_ts != 0) {
    return Status::Corruption(where + ": bad K row size " + Str(l.k_row_size));
  }
  if (l.v_type == kNoV) {  // an MLA cache: K only
    if (l.v_row_size != 0 || l.v_el_size != 0 || l.v_n_embd != 0) {
      return Status::Corruption(where + ": a layer without V has V sizes");
    }
    return Status::OK();
  }
  if (!ValidType(l.v_type)) return Status::Corruption(where + ": bad V type");
  if (v_trans) {
    const auto vt = static_cast<ggml_type>(l.v_type);
    if (ggml_blck_size(vt) != 1 || l.v_el_size != ggml_type_size(vt) || l.v_n_embd == 0 ||
        l.v_row_size != uint64_t(l.v_el_size) * l.v_n_embd) {
      return Status::Corruption(where + ": bad transposed V shape");
    }
  } else if (l.v_row_size == 0 || l.v_el_size != 0 || l.v_n_embd != 0 ||
             l.v_row_size % ggml_type_size(static_cast<ggml_type>(l.v_type)) != 0) {
    return Status::Corruption(where + ": bad V row size " + Str(l.v_row_size));
  }
  return Status::OK();
}

// The non-empty stream of a kv section: InvalidArgument when none, NotSupported when several.
Result<uint32_t> OnlyStream(const KvSection& kv, const char* what) {
  int found = -1;
  for (size_t s = 0; s < kv.streams.size(); ++s) {
    if (kv.streams[s].cells.empty()) continue;
    if (found >= 0) {
      return Status::NotSupported(std::string(what) + ": tokens in more than one stream");
    }
    found = int(s);
  }
  if (found < 0) return Status::InvalidArgument(std::string(what) + ": holds no tokens");
  return uint32_t(found);
}

Result<std::vector<LayerShape>> LayersOf(const KvStream& s, const char* what) {
  if (!s.v.empty() && s.v.size() != s.k.size()) {
    return Status::InvalidArgument(std::string(what) + ": some layers have V, some not");
  }
  std::vector<LayerShape> layers(s.k.size());
  for (size_t il = 0; il < s.k.size(); ++il) {
    layers[il] = LayerShape{s.k[il].type, s.k[il].row_size, kNoV, 0, 0, 0};
    if (s.v.empty()) continue;  // MLA: K only
    layers[il].v_type = s.v[il].type;
    layers[il].v_row_size = s.v[il].row_size;
    layers[il].v_el_size = s.v[il].el_size;
    layers[il].v_n_embd = s.v[il].n_embd;
  }
  return layers;
}

// The row sections of a state (the base kv section, then the index section if any).
std::vector<const KvSection*> RowSections(const ParsedState& ps) {
  std::vector<const KvSection*> out = {&ps.kv};
  if (ps.has_index) out.push_back(&ps.index);
  return out;
}

// Positions must run base, base+1, … in cell order (base = the first cell's position: 0 for a
// whole state, p0 for a ranged one).
Status CheckContiguous(const KvStream& s) {
  const int32_t base = s.cells.empty() ? 0 : s.cells[0].pos;
  for (size_t i = 0; i < s.cells.size(); ++i) {
    if (s.cells[i].pos != base + int32_t(i)) {
      return Status::InvalidArgument("rows: cell " + Str(i) + " holds position " +
                                     std::to_string(s.cells[i].pos) + " (positions must be " +
                                     std::to_string(base) + ".." + std::to_string(base) +
                                     "+Q-1 in cell order)");
    }
    if (s.cells[i].n_seq_id != 1) {
      return Status::InvalidArgument("rows: cell " + Str(i) + " belongs to " +
                                     Str(s.cells[i].n_seq_id) + " sequences");
    }
  }
  return Status::OK();
}

void PutLayerTable(const std::vector<LayerShape>& layers, ByteWriter& w) {
  for (const LayerShape& l : layers) {
    w.Put(l.k_type);
    w.Put(l.v_type);
    w.Put(l.k_row_size);
    w.Put(l.v_row_size);
    w.Put(l.v_el_size);
    w.Put(l.v_n_embd);
  }
}

}  // namespace

Result<StateShape> StateShapeOf(const ParsedState& ps) {
  StateShape shape;
  shape.layout = ps.layout;
  shape.seq_id = ps.seq_id;
  if (ps.has_rows) {
    PREFIXD_ASSIGN_OR_RETURN(shape.stream, OnlyStream(ps.kv, "reference state"));
    const KvStream& s = ps.kv.streams[shape.stream];
    shape.n_stream = uint32_t(ps.kv.streams.size());
    shape.cell_ext = ps.kv.cell_ext;
    shape.v_trans = s.v_trans;
    shape.kv_has_v = ps.kv.has_v;
    PREFIXD_ASSIGN_OR_RETURN(shape.layers, LayersOf(s, "reference state"));
  }
  if (ps.has_index) {
    const KvStream& s = ps.index.streams[shape.stream];  // mirrors the base (checked by parse)
    if (s.v_trans != shape.v_trans) return Status::NotSupported("reference state: index v_trans");
    if (ps.index.cell_ext && !ps.kv.cell_ext) {
      return Status::NotSupported("reference state: only the index cells carry an ext");
    }
    shape.has_index = true;
    shape.index_cell_ext = ps.index.cell_ext;
    shape.index_has_v = ps.index.has_v;
    shape.index_after_partial = ps.layout == MemoryLayout::kHybridIdx;
    PREFIXD_ASSIGN_OR_RETURN(shape.index_layers, LayersOf(s, "reference index section"));
  }
  if (ps.has_swa) {
    PREFIXD_ASSIGN_OR_RETURN(uint32_t swa_stream, OnlyStream(ps.swa, "reference SWA section"));
    if (ps.has_rows && ps.swa.streams.size() != shape.n_stream) {
      return Status::NotSupported("reference state: SWA and base stream counts differ");
    }
    shape.swa_v_trans = ps.swa.streams[swa_stream].v_trans;
    shape.swa_has_v = ps.swa.has_v;
    PREFIXD_ASSIGN_OR_RETURN(shape.swa_layers,
                             LayersOf(ps.swa.streams[swa_stream], "reference SWA section"));
  }
  if (ps.has_recurrent) {
    if (ps.recurrent.cell_pos.size() != 1) {
      return Status::NotSupported("reference state: " + Str(ps.recurrent.cell_pos.size()) +
                                  " recurrent cells (need exactly one)");
    }
    shape.recurrent_bytes = ps.recurrent.bytes.size;
  }
  shape.learned = true;
  return shape;
}

namespace {

// One row section's stream holding the rows, checked: positions base..base+Q-1 in cell order.
struct RowStream {
  const KvStream* s = nullptr;
  std::vector<LayerShape> layers;
};

Result<std::vector<RowStream>> RowStreamsOf(const ParsedState& ps, uint32_t stream) {
  std::vector<RowStream> out;
  for (const KvSection* sec : RowSections(ps)) {
    RowStream rs;
    rs.s = &sec->streams[stream];
    PREFIXD_RETURN_IF_ERROR(CheckContiguous(*rs.s));
    PREFIXD_ASSIGN_OR_RETURN(rs.layers, LayersOf(*rs.s, "rows: state"));
    if (!out.empty() && (rs.s->cells.size() != out[0].s->cells.size() ||
                         rs.s->v_trans != out[0].s->v_trans)) {
      return Status::InvalidArgument("rows: the index section does not mirror the base");
    }
    out.push_back(std::move(rs));
  }
  return out;
}

void PutRowData(const ParsedState& ps, const std::vector<RowStream>& secs, int64_t i0, uint64_t n,
                ByteWriter& w) {
  for (const RowStream& rs : secs) {
    for (const KvTensor& t : rs.s->k) {
      w.Append(ps.bytes.subspan(t.data.offset + i0 * t.row_size, n * t.row_size));
    }
  }
  for (const RowStream& rs : secs) {
    const uint64_t q = rs.s->cells.size();
    for (const KvTensor& t : rs.s->v) {
      if (!rs.s->v_trans) {
        w.Append(ps.bytes.subspan(t.data.offset + i0 * t.row_size, n * t.row_size));
        continue;
      }
      for (uint64_t j = 0; j < t.n_embd; ++j) {
        w.Append(ps.bytes.subspan(t.data.offset + (j * q + i0) * t.el_size, n * t.el_size));
      }
    }
  }
}

}  // namespace

bool HoldsRowsExactly(const ParsedState& state, int32_t p0, int32_t p1) {
  if (!state.has_rows) return false;
  for (const KvStream& s : state.kv.streams) {
    if (s.cells.empty()) continue;
    return s.cells.size() == size_t(p1 - p0) && s.cells.front().pos == p0 &&
           s.cells.back().pos == p1 - 1;
  }
  return false;
}

Result<std::vector<uint8_t>> EncodeRows(const ParsedState& ps, int32_t p0, int32_t p1) {
  if (!ps.has_rows) return Status::NotSupported("rows: the state has no attention rows");
  PREFIXD_ASSIGN_OR_RETURN(uint32_t stream, OnlyStream(ps.kv, "rows: state"));
  PREFIXD_ASSIGN_OR_RETURN(std::vector<RowStream> secs, RowStreamsOf(ps, stream));
  const KvStream& s = *secs[0].s;
  const int64_t q = int64_t(s.cells.size());
  const int64_t base = s.cells.empty() ? 0 : s.cells[0].pos;
  if (p0 < base || p0 >= p1 || p1 > base + q) {
    return Status::InvalidArgument("rows: range [" + std::to_string(p0) + ", " +
                                   std::to_string(p1) + ") is not inside a state holding [" +
                                   std::to_string(base) + ", " + std::to_string(base + q) + ")");
  }
  const int64_t i0 = p0 - base;  // the first cell of the range
  RowsInfo info;
  info.p0 = p0;
  info.n_tokens = uint32_t(p1 - p0);
  info.v_trans = s.v_trans;
  info.cell_ext = ps.kv.cell_ext;
  for (const RowStream& rs : secs) {
    info.layers.insert(info.layers.end(), rs.layers.begin(), rs.layers.end());
  }
  RowsOffsets offsets;
  if (!ComputeOffsets(info, &offsets)) return Status::InvalidArgument("rows: size overflows");

  // The rows outlive the request (the RAM tier keeps them): memory already present, from the
  // pool, else populated in one go rather than a page fault per 4 KiB written.
  std::vector<uint8_t> out;
  if (BufferPool::Shared().TakeKept(size_t(offsets.end), &out)) {
    out.clear();  // the capacity stays: the writes below land in its pages
  } else {
    ReservePopulated(&out, size_t(offsets.end));
  }
  ByteWriter w(&out);
  w.Put(kRowsMagic);
  w.Put(kRowsVersion);
  w.Put(uint16_t((info.v_trans ? kFlagVTrans : 0) | (info.cell_ext ? kFlagCellExt : 0)));
  w.Put(p0);
  w.Put(info.n_tokens);
  w.Put(uint32_t(info.layers.size()));
  w.Put(uint32_t(0));
  PutLayerTable(info.layers, w);
  if (info.cell_ext) {
    for (int64_t i = i0; i < i0 + int64_t(info.n_tokens); ++i) w.Put(s.cells[i].ext);
  }
  if (ps.has_index && ps.index.cell_ext) {  // the payload keeps one ext per token
    const KvStream& x = *secs[1].s;
    for (int64_t i = i0; i < i0 + int64_t(info.n_tokens); ++i) {
      if (!info.cell_ext || x.cells[i].ext != s.cells[i].ext) {
        return Status::NotSupported("rows: the index cells' ext differs from the base's");
      }
    }
  }
  PutRowData(ps, secs, i0, info.n_tokens, w);
  if (out.size() != offsets.end) return Status::Internal("rows: encoded size mismatch");
  return out;
}

Result<uint64_t> RowsFrontBytes(std::span<const uint8_t> head) {
  static_assert(kRowsHeadBytes == kRowsHeaderSize);
  ByteReader r(head, "rows payload");
  uint32_t magic = 0, p0 = 0, n_tokens = 0, n_layer = 0;
  uint16_t version = 0, flags = 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kRowsMagic) return r.Error("bad magic");
  PREFIXD_RETURN_IF_ERROR(r.Read(&version, "version"));
  if (version != kRowsVersion) return r.Error("unknown version " + Str(version));
  PREFIXD_RETURN_IF_ERROR(r.Read(&flags, "flags"));
  PREFIXD_RETURN_IF_ERROR(r.Read(&p0, "p0"));
  PREFIXD_RETURN_IF_ERROR(r.Read(&n_tokens, "n_tokens"));
  PREFIXD_RETURN_IF_ERROR(r.Read(&n_layer, "n_layer"));
  return kRowsHeaderSize + kRowsLayerSize * uint64_t(n_layer) +
         ((flags & kFlagCellExt) != 0 ? kCellExtSize * uint64_t(n_tokens) : 0);
}

Result<RowsInfo> ReadRowsInfo(std::span<const uint8_t> payload) {
  ByteReader r(payload, "rows payload");
  uint32_t magic = 0, n_layer = 0, reserved = 0;
  uint16_t version = 0, flags = 0;
  RowsInfo info;
  PREFIXD_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kRowsMagic) return r.Error("bad magic");
  PREFIXD_RETURN_IF_ERROR(r.Read(&version, "version"));
  if (version != kRowsVersion) return r.Error("unknown version " + Str(version));
  PREFIXD_RETURN_IF_ERROR(r.Read(&flags, "flags"));
  if ((flags & ~(kFlagVTrans | kFlagCellExt)) != 0) return r.Error("unknown flags " + Str(flags));
  info.v_trans = (flags & kFlagVTrans) != 0;
  info.cell_ext = (flags & kFlagCellExt) != 0;
  PREFIXD_RETURN_IF_ERROR(r.Read(&info.p0, "p0"));
  PREFIXD_RETURN_IF_ERROR(r.Read(&info.n_tokens, "n_tokens"));
  PREFIXD_RETURN_IF_ERROR(r.Read(&n_layer, "n_layer"));
  PREFIXD_RETURN_IF_ERROR(r.Read(&reserved, "reserved"));
  if (info.p0 < 0 || info.n_tokens == 0 || int64_t(info.p0) + info.n_tokens > INT32_MAX) {
    return r.Error("bad token range p0 " + std::to_string(info.p0) + " n_tokens " +
                   Str(info.n_tokens));
  }
  if (reserved != 0) return r.Error("reserved field is not zero");
  if (uint64_t(n_layer) * kRowsLayerSize > r.remaining()) return r.Error("layer table truncated");
  info.layers.resize(n_layer);
  for (size_t il = 0; il < n_layer; ++il) {
    LayerShape& l = info.layers[il];
    PREFIXD_RETURN_IF_ERROR(r.Read(&l.k_type, "K type"));
    PREFIXD_RETURN_IF_ERROR(r.Read(&l.v_type, "V type"));
    PREFIXD_RETURN_IF_ERROR(r.Read(&l.k_row_size, "K row size"));
    PREFIXD_RETURN_IF_ERROR(r.Read(&l.v_row_size, "V row size"));
    PREFIXD_RETURN_IF_ERROR(r.Read(&l.v_el_size, "V element size"));
    PREFIXD_RETURN_IF_ERROR(r.Read(&l.v_n_embd, "V embedding size"));
    PREFIXD_RETURN_IF_ERROR(CheckLayerShape(l, info.v_trans, il));
  }
  RowsOffsets offsets;
  if (!ComputeOffsets(info, &offsets) || offsets.end != payload.size()) {
    return Status::Corruption("rows payload: size " + Str(payload.size()) +
                              " does not match its header");
  }
  return info;
}

namespace {

// A payload checked against the shape, with its offsets.
struct CheckedRows {
  std::span<const uint8_t> bytes;
  RowsInfo info;
  RowsOffsets offsets;
  uint32_t n_used = 0;
};

Status CheckRowsAgainstShape(const RowsInfo& info, const StateShape& shape, size_t i) {
  const std::string where = "rows payload " + Str(i);
  if (info.v_trans != shape.v_trans) return Status::InvalidArgument(where + ": v_trans differs");
  if (info.cell_ext != shape.cell_ext) {
    return Status::InvalidArgument(where + ": cell ext differs");
  }
  const size_t n_base = shape.layers.size();
  if (info.layers.size() != n_base + shape.index_layers.size()) {
    return Status::InvalidArgument(where + ": " + Str(info.layers.size()) + " layers, expected " +
                                   Str(n_base + shape.index_layers.size()));
  }
  for (size_t il = 0; il < info.layers.size(); ++il) {
    const LayerShape& want = il < n_base ? shape.layers[il] : shape.index_layers[il - n_base];
    if (!(info.layers[il] == want)) {
      return Status::InvalidArgument(where + ": layer " + Str(il) +
                                     " type or row size differs from the model's");
    }
  }
  return Status::OK();
}

Result<std::vector<CheckedRows>> CheckRows(std::span<const RowsRef> rows, const StateShape& shape,
                                           int32_t* p_out) {
  std::vector<CheckedRows> out(rows.size());
  int64_t p = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    CheckedRows& c = out[i];
    c.bytes = rows[i].payload;
    PREFIXD_ASSIGN_OR_RETURN(c.info, ReadRowsInfo(c.bytes));
    PREFIXD_RETURN_IF_ERROR(CheckRowsAgainstShape(c.info, shape, i));
    if (c.info.p0 != p) {
      return Status::InvalidArgument("rows payload " + Str(i) + " starts at " +
                                     std::to_string(c.info.p0) + ", expected " + Str(p));
    }
    c.n_used = rows[i].n_tokens_used;
    if (c.n_used == 0 || c.n_used > c.info.n_tokens) {
      return Status::InvalidArgument("rows payload " + Str(i) + ": uses " + Str(c.n_used) +
                                     " of " + Str(c.info.n_tokens) + " tokens");
    }
    ComputeOffsets(c.info, &c.offsets);  // cannot fail: ReadRowsInfo computed it
    p += c.n_used;
  }
  *p_out = int32_t(p);
  return out;
}

Status CheckSwaPartial(const ParsedState& part, const StateShape& shape, int32_t p) {
  if (part.swa.streams.size() != shape.n_stream) {
    return Status::InvalidArgument("partial: SWA section has " + Str(part.swa.streams.size()) +
                                   " streams, expected " + Str(shape.n_stream));
  }
  if (part.swa.cell_ext != shape.cell_ext) {
    return Status::InvalidArgument("partial: SWA cell ext differs");
  }
  PREFIXD_ASSIGN_OR_RETURN(uint32_t stream, OnlyStream(part.swa, "partial: SWA section"));
  const KvStream& s = part.swa.streams[stream];
  PREFIXD_ASSIGN_OR_RETURN(std::vector<LayerShape> layers, LayersOf(s, "partial: SWA section"));
  if (s.v_trans != shape.swa_v_trans || layers != shape.swa_layers) {
    return Status::InvalidArgument("partial: SWA layers differ from the model's");
  }
  int32_t max_pos = -1;
  for (const KvCell& c : s.cells) {
    if (c.pos < 0 || c.pos >= p) {
      return Status::InvalidArgument("partial: SWA cell at position " + std::to_string(c.pos) +
                                     " outside [0, " + std::to_string(p) + ")");
    }
    max_pos = std::max(max_pos, c.pos);
  }
  if (max_pos != p - 1) {
    return Status::InvalidArgument("partial: SWA section ends at position " +
                                   std::to_string(max_pos) + ", expected " +
                                   std::to_string(p - 1) + " (taken at another position)");
  }
  return Status::OK();
}

Status CheckRecurrentPartial(const ParsedState& part, const StateShape& shape, int32_t p) {
  const RecurrentSection& rec = part.recurrent;
  if (rec.bytes.size != shape.recurrent_bytes) {
    return Status::InvalidArgument("partial: recurrent section is " + Str(rec.bytes.size) +
                                   " bytes, expected " + Str(shape.recurrent_bytes));
  }
  if (rec.cell_pos.size() != 1) {
    return Status::InvalidArgument("partial: " + Str(rec.cell_pos.size()) +
                                   " recurrent cells, expected 1");
  }
  if (p >= 0 && rec.cell_pos[0] != p - 1) {
    return Status::InvalidArgument("partial: recurrent state is at position " +
                                   std::to_string(rec.cell_pos[0]) + ", expected " +
                                   std::to_string(p - 1) + " (taken at another position)");
  }
  return Status::OK();
}

// Parses `partial` and checks it against the shape and the rows' end P (-1: unknown).
Result<ParsedState> CheckPartial(std::span<const uint8_t> partial, const StateShape& shape,
                                 int32_t p) {
  if (partial.empty()) {
    return Status::InvalidArgument(std::string("partial: missing (a ") +
                                   MemoryLayoutName(shape.layout) +
                                   " state needs the partial taken at P)");
  }
  StateFormat format;
  format.layout = shape.layout;
  format.cell_ext = shape.cell_ext;
  format.kv_has_v = shape.swa_has_v;  // the only kv section of a partial is the SWA one
  auto part = ParsePartialState(partial, format);
  if (!part.ok()) return part.status().WithContext("partial");
  if (part->has_swa) PREFIXD_RETURN_IF_ERROR(CheckSwaPartial(*part, shape, p));
  if (part->has_recurrent) PREFIXD_RETURN_IF_ERROR(CheckRecurrentPartial(*part, shape, p));
  return part;
}

size_t AssembledSize(const StateShape& shape, uint32_t p, size_t partial_body) {
  size_t n = 8 + 2 * (4 + 4 * size_t(shape.n_stream));
  n += 2 * (size_t(p) * (12 + (shape.cell_ext ? kCellExtSize : 0)) + 8);
  for (const auto* layers : {&shape.layers, &shape.index_layers}) {
    for (const LayerShape& l : *layers) {
      n += 12 + p * l.k_row_size + 12 + p * l.v_row_size;  // type + row size (or el, n_embd)
    }
  }
  return n + partial_body;
}

template <typename W>
void PutCells(std::span<const CheckedRows> rows, const StateShape& shape, bool cell_ext, W& w) {
  int32_t pos = 0;
  for (const CheckedRows& c : rows) {
    for (uint32_t i = 0; i < c.n_used; ++i) {
      w.Put(pos++);
      w.Put(uint32_t(1));
      if (cell_ext) w.Append(c.bytes.subspan(c.offsets.ext + i * kCellExtSize, kCellExtSize));
      w.Put(shape.seq_id);
    }
  }
}

// The layers `layers` of a row section, which are the payloads' layers from `first` on.
template <typename W>
void PutLayers(std::span<const CheckedRows> rows, const StateShape& shape,
               const std::vector<LayerShape>& layers, size_t first, W& w) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerShape& l = layers[i];
    const size_t il = first + i;
    w.Put(l.k_type);
    w.Put(l.k_row_size);
    for (const CheckedRows& c : rows) {
      w.Append(c.bytes.subspan(c.offsets.k[il], c.n_used * l.k_row_size));
    }
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerShape& l = layers[i];
    const size_t il = first + i;
    if (l.v_type == kNoV) continue;  // MLA: the cache writes no V
    w.Put(l.v_type);
    if (!shape.v_trans) {
      w.Put(l.v_row_size);
      for (const CheckedRows& c : rows) {
        w.Append(c.bytes.subspan(c.offsets.v[il], c.n_used * l.v_row_size));
      }
      continue;
    }
    w.Put(l.v_el_size);
    w.Put(l.v_n_embd);
    for (uint64_t j = 0; j < l.v_n_embd; ++j) {
      for (const CheckedRows& c : rows) {
        const size_t row = c.offsets.v[il] + j * c.info.n_tokens * l.v_el_size;
        w.Append(c.bytes.subspan(row, c.n_used * l.v_el_size));
      }
    }
  }
}

// A row section (the base or the index) of the assembled state.
template <typename W>
void PutRowSection(std::span<const CheckedRows> rows, const StateShape& shape, int32_t p,
                   bool index, W& w) {
  w.Put(shape.n_stream);
  for (uint32_t s = 0; s < shape.n_stream; ++s) {
    if (s != shape.stream) {
      w.Put(uint32_t(0));
      continue;
    }
    const std::vector<LayerShape>& layers = index ? shape.index_layers : shape.layers;
    w.Put(uint32_t(p));
    PutCells(rows, shape, index ? shape.index_cell_ext : shape.cell_ext, w);
    w.Put(uint32_t(shape.v_trans ? 1 : 0));
    w.Put(uint32_t(layers.size()));
    PutLayers(rows, shape, layers, index ? shape.layers.size() : 0, w);
  }
}

}  // namespace

Status CheckPartialState(std::span<const uint8_t> partial, const StateShape& shape, int32_t p) {
  return CheckPartial(partial, shape, p).status();
}

Result<std::vector<uint8_t>> AssembleState(std::span<const RowsRef> rows,
                                           std::span<const uint8_t> partial,
                                           const StateShape& shape, int32_t expected_p) {
  std::vector<uint8_t> out;
  PREFIXD_RETURN_IF_ERROR(AssembleStateInto(rows, partial, shape, expected_p, &out));
  return out;
}

namespace {

// Checks the rows and the partial against `shape` and writes the whole state through `w`
// (ByteWriter: one buffer; PieceWriter: pieces into the payloads). `reserve` is called with the
// state's size before anything is written.
template <typename W, typename Reserve>
Status AssembleWith(std::span<const RowsRef> rows, std::span<const uint8_t> partial,
                    const StateShape& shape, int32_t expected_p, W& w, Reserve reserve) {
  if (!LayoutHasRows(shape.layout)) {
    if (!rows.empty()) return Status::InvalidArgument("assemble: a recurrent state has no rows");
    PREFIXD_RETURN_IF_ERROR(CheckPartial(partial, shape, expected_p).status());
    reserve(partial.size());
    w.Append(partial);
    return Status::OK();
  }
  if (rows.empty()) return Status::InvalidArgument("assemble: no rows");
  if (!shape.learned || shape.stream >= shape.n_stream) {
    return Status::InvalidArgument("assemble: the state shape is not a learned one");
  }
  int32_t p = 0;
  PREFIXD_ASSIGN_OR_RETURN(std::vector<CheckedRows> checked, CheckRows(rows, shape, &p));
  if (expected_p >= 0 && p != expected_p) {
    return Status::InvalidArgument("assemble: rows cover [0, " + std::to_string(p) +
                                   "), expected [0, " + std::to_string(expected_p) + ")");
  }
  std::span<const uint8_t> partial_body;
  if (LayoutNeedsSnapshot(shape.layout)) {
    PREFIXD_ASSIGN_OR_RETURN(ParsedState part, CheckPartial(partial, shape, p));
    partial_body = partial.subspan(part.partial.offset, part.partial.size);
  } else if (!partial.empty()) {
    return Status::InvalidArgument("assemble: an attention-only state takes no partial");
  }
  reserve(AssembledSize(shape, uint32_t(p), partial_body.size()));
  w.Put(kSeqStateMagic);
  w.Put(shape.seq_id);
  PutRowSection(checked, shape, p, /*index=*/false, w);
  if (shape.has_index && !shape.index_after_partial) PutRowSection(checked, shape, p, true, w);
  w.Append(partial_body);
  if (shape.has_index && shape.index_after_partial) PutRowSection(checked, shape, p, true, w);
  return Status::OK();
}

}  // namespace

Status AssembleStateInto(std::span<const RowsRef> rows, std::span<const uint8_t> partial,
                         const StateShape& shape, int32_t expected_p, std::vector<uint8_t>* out) {
  out->clear();
  ByteWriter w(out);
  return AssembleWith(rows, partial, shape, expected_p, w, [&](size_t n) { out->reserve(n); });
}

Status AssembleStatePieces(std::span<const RowsRef> rows, std::span<const uint8_t> partial,
                           const StateShape& shape, int32_t expected_p, StatePieces* out) {
  using Piece = internal::PieceWriter::Piece;
  out->headers.clear();
  out->pieces.clear();
  out->size = 0;
  std::vector<Piece> raw;
  internal::PieceWriter w(&out->headers, &raw);
  PREFIXD_RETURN_IF_ERROR(
      AssembleWith(rows, partial, shape, expected_p, w, [](size_t) {}));
  out->pieces.reserve(raw.size());
  for (const Piece& piece : raw) {
    const uint8_t* data = piece.data ? piece.data : out->headers.data() + piece.offset;
    out->pieces.emplace_back(data, piece.size);
    out->size += piece.size;
  }
  return Status::OK();
}

}  // namespace prefixd::engine
