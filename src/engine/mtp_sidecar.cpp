#include "engine/mtp_sidecar.h"

#include <cstring>

#include "engine/context.h"
#include "engine/model/model.h"
#include "engine/speculation.h"
#include "llama.h"
#include "util/hash.h"
#include "util/log.h"

namespace prefixd::engine {

namespace {

using cache::PayloadRef;

// A carry payload: magic, row width, the row (floats, little-endian).
constexpr uint32_t kCarryMagic = 0x4D545043;  // "CPTM"

using cache::MakePayload;

std::vector<uint8_t> EncodeCarry(const std::vector<float>& h) {
  std::vector<uint8_t> out(8 + h.size() * sizeof(float));
  const uint32_t head[2] = {kCarryMagic, uint32_t(h.size())};
  std::memcpy(out.data(), head, sizeof head);
  std::memcpy(out.data() + 8, h.data(), h.size() * sizeof(float));
  return out;
}

Result<std::vector<float>> DecodeCarry(std::span<const uint8_t> bytes, size_t width) {
  uint32_t head[2] = {0, 0};
  if (bytes.size() >= sizeof head) std::memcpy(head, bytes.data(), sizeof head);
  if (head[0] != kCarryMagic || head[1] != width || bytes.size() != 8 + width * sizeof(float)) {
    return Status::Corruption("MTP carry: not a carry of " + std::to_string(width) + " floats");
  }
  std::vector<float> h(width);
  std::memcpy(h.data(), bytes.data() + 8, width * sizeof(float));
  return h;
}

// A row payload of a target without Snapshots: the head's rows of k tokens and the target's
// hidden row of each of them (the carry of a restore that ends after it): magic, k, the rows'
// byte count, the rows, k carries (floats, little-endian).
constexpr uint32_t kRowCarriesMagic = 0x4D54434B;  // "KCTM"

std::vector<uint8_t> PackRowsWithCarries(const std::vector<uint8_t>& rows,
                                         const std::vector<float>& carries, uint32_t k) {
  const uint64_t n_rows = rows.size();
  std::vector<uint8_t> out(16 + rows.size() + carries.size() * sizeof(float));
  const uint32_t head[2] = {kRowCarriesMagic, k};
  std::memcpy(out.data(), head, sizeof head);
  std::memcpy(out.data() + 8, &n_rows, sizeof n_rows);
  std::memcpy(out.data() + 16, rows.data(), rows.size());
  std::memcpy(out.data() + 16 + rows.size(), carries.data(), carries.size() * sizeof(float));
  return out;
}

struct RowsWithCarries {
  std::span<const uint8_t> rows;
  std::span<const uint8_t> carries;  // k rows of `width` floats
  uint32_t k = 0;
};

Result<RowsWithCarries> UnpackRowsWithCarries(std::span<const uint8_t> bytes, size_t width) {
  uint32_t head[2] = {0, 0};
  uint64_t n_rows = 0;
  if (bytes.size() >= 16) {
    std::memcpy(head, bytes.data(), sizeof head);
    std::memcpy(&n_rows, bytes.data() + 8, sizeof n_rows);
  }
  const uint64_t n_carries = uint64_t(head[1]) * width * sizeof(float);
  if (head[0] != kRowCarriesMagic || n_rows > bytes.size() ||
      bytes.size() - 16 < n_rows || bytes.size() - 16 - n_rows != n_carries) {
    return Status::Corruption("MTP head rows: not rows with carries of " +
                              std::to_string(width) + " floats");
  }
  return RowsWithCarries{bytes.subspan(16, n_rows), bytes.subspan(16 + n_rows), head[1]};
}

// The head's own cache is a plain KV cache over its one layer, with the target's kind of rows
// (MLA's: K only). The target's recurrent state, window or index cache is not the head's.
StateFormat HeadFormat(const StateFormat& target) {
  StateFormat f;
  f.layout = MemoryLayout::kAttention;
  f.cell_ext = target.cell_ext;
  f.kv_has_v = target.kv_has_v;
  return f;
}

// Two rows decoded into the head's `seq` (tokens 0, zero hidden states), their state parsed:
// the shape every later state of the head has. Leaves `seq` empty.
Result<StateShape> ProbeHeadShape(Context& head, const StateFormat& format, int32_t seq) {
  const int32_t n_embd = llama_model_n_embd_out(head.model().raw());
  llama_batch b = llama_batch_init(2, n_embd, 1);
  b.token = static_cast<llama_token*>(malloc(2 * sizeof(llama_token)));  // freed by batch_free
  for (int32_t i = 0; i < 2; ++i) {
    b.token[i] = 0;
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = seq;
    b.logits[i] = i == 1;
  }
  std::memset(b.embd, 0, sizeof(float) * size_t(2 * n_embd));
  b.n_tokens = 2;
  const int rc = llama_decode(head.raw(), b);
  llama_batch_free(b);
  if (rc != 0) {
    head.SeqClear(seq);
    return Status::Internal("MTP head: probe decode failed (" + std::to_string(rc) + ")");
  }
  Result<std::vector<uint8_t>> state = head.GetState(seq, StatePart::kWhole);
  head.SeqClear(seq);
  if (!state.ok()) return state.status();
  PREFIXD_ASSIGN_OR_RETURN(ParsedState parsed, ParseState(*state, format));
  return StateShapeOf(parsed);
}

}  // namespace

Result<std::unique_ptr<MtpSidecar>> MtpSidecar::Create(Drafter& drafter,
                                                       cache::TieredCache& cache,
                                                       uint32_t block_size, int32_t probe_seq) {
  Context* head = drafter.mtp_head();
  if (head == nullptr) return Status::Internal("MTP sidecar without an MTP head");
  const cache::PrefixCache::Options& co = cache.ram().options();
  if (!co.has_rows) {
    return Status::NotSupported("the MTP head's history is cached for targets with rows");
  }
  StateFormat format = HeadFormat(head->model().state_format());
  PREFIXD_ASSIGN_OR_RETURN(StateShape shape, ProbeHeadShape(*head, format, probe_seq));
  std::unique_ptr<MtpSidecar> s(new MtpSidecar(drafter, *head, cache, block_size, std::move(shape)));
  s->format_ = format;
  s->carries_in_rows_ = !co.needs_snapshot;
  drafter.KeepMtpHiddenRows(s->carries_in_rows_);
  return s;
}

MtpSidecar::MtpSidecar(Drafter& drafter, Context& head, cache::TieredCache& cache,
                       uint32_t block_size, StateShape shape)
    : drafter_(drafter), head_(head), cache_(cache), block_size_(int32_t(block_size)),
      shape_(std::move(shape)) {}

MtpSidecar::~MtpSidecar() = default;

Digest MtpSidecar::DomainOf(const Digest& domain) {
  Sha256 h;
  h.Update("prefixd mtp head history v1");
  h.Update(domain.data(), domain.size());
  return h.Finish();
}

Result<std::vector<uint8_t>> MtpSidecar::TakeCarry(int32_t seq) const {
  if (carries_in_rows_) return std::vector<uint8_t>{};  // the rows carry theirs
  std::vector<float> h;
  if (!drafter_.MtpCarry(seq, &h)) return Status::Internal("MTP head: no carry");
  return EncodeCarry(h);
}

Status MtpSidecar::Publish(int32_t seq, const Digest& domain, std::span<const Token> tokens,
                           int32_t from, std::span<const PendingSnapshot> pending) {
  const int32_t n = int32_t(tokens.size());
  const int32_t B = block_size_;
  const int32_t first = from / B;
  if (first * B >= n || head_.SeqPosMax(seq) < n - 1) return Status::OK();
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> state, head_.GetStateRange(seq, first * B, n));
  PREFIXD_ASSIGN_OR_RETURN(ParsedState parsed, ParseState(state, format_));
  if (!HoldsRowsExactly(parsed, first * B, n)) return Status::OK();  // the head started later
  const Digest d = DomainOf(domain);
  if (carries_in_rows_) return PublishWithCarries(seq, d, tokens, first, parsed, pending);
  std::vector<PayloadRef> rows;
  for (int32_t k = first; (k + 1) * B <= n; ++k) {
    PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(parsed, k * B, (k + 1) * B));
    rows.push_back(MakePayload(std::move(r)));
  }
  if (!rows.empty()) cache_.InsertBlocks(d, tokens, size_t(first), rows);
  rows.clear();
  for (const PendingSnapshot& s : pending) {
    if (s.mtp_carry.empty() || s.pos > n) continue;
    PayloadRef tail;
    if (s.pos % B != 0) {
      PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(parsed, s.pos / B * B, s.pos));
      tail = MakePayload(std::move(r));
    }
    cache_.InsertSnapshot(d, tokens.first(size_t(s.pos)), s.kind, MakePayload(s.mtp_carry), tail);
  }
  return Status::OK();
}

Result<PayloadRef> MtpSidecar::RowsWithCarriesOf(int32_t seq, const ParsedState& parsed,
                                                  int32_t p0, int32_t p1) const {
  std::vector<float> carries;
  if (!drafter_.MtpHiddenRows(seq, p0, p1, &carries)) return PayloadRef{};
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(parsed, p0, p1));
  return MakePayload(PackRowsWithCarries(r, carries, uint32_t(p1 - p0)));
}

// Blocks and Tails whose every row has its carry beside it; a range whose hidden rows the
// observer no longer holds (the head's sequence started later) is left out.
Status MtpSidecar::PublishWithCarries(int32_t seq, const Digest& d, std::span<const Token> tokens,
                                      int32_t first, const ParsedState& parsed,
                                      std::span<const PendingSnapshot> pending) {
  const int32_t n = int32_t(tokens.size());
  const int32_t B = block_size_;
  std::vector<PayloadRef> rows;
  for (int32_t k = first; (k + 1) * B <= n; ++k) {
    PREFIXD_ASSIGN_OR_RETURN(PayloadRef r, RowsWithCarriesOf(seq, parsed, k * B, (k + 1) * B));
    if (!r) break;
    rows.push_back(std::move(r));
  }
  if (!rows.empty()) cache_.InsertBlocks(d, tokens, size_t(first), rows);
  const bool whole = first + int32_t(rows.size()) == n / B;
  rows.clear();
  for (const PendingSnapshot& s : pending) {
    if (!whole || s.pos > n || s.pos % B == 0 || s.pos / B < first) continue;
    PREFIXD_ASSIGN_OR_RETURN(PayloadRef tail, RowsWithCarriesOf(seq, parsed, s.pos / B * B, s.pos));
    if (tail) cache_.InsertSnapshot(d, tokens.first(size_t(s.pos)), s.kind, nullptr, tail);
  }
  drafter_.DropMtpHiddenRowsBefore(seq, n / B * B);  // the next publish starts there
  return Status::OK();
}

int32_t MtpSidecar::Restore(int32_t seq, const Digest& domain, std::span<const Token> tokens,
                            int32_t p) {
  head_.SeqClear(seq);
  if (p <= 0) return 0;
  cache::TieredCache::Found f =
      cache_.Lookup(DomainOf(domain), tokens, size_t(p), size_t(p), cache::Reach::kLocal);
  if (f.match.n_tokens != size_t(p)) return 0;
  Status st = SetHistory(seq, f.match);
  if (st.ok()) return p;
  head_.SeqClear(seq);
  Logf(LogLevel::kWarning, "MTP head history at %d refused: %s", p, st.ToString().c_str());
  return 0;
}

Status MtpSidecar::SetHistory(int32_t seq, const cache::PrefixCache::Match& m) {
  if (carries_in_rows_) return SetHistoryWithCarries(seq, m);
  if (!m.snapshot) return Status::Corruption("MTP head history without its carry");
  std::vector<RowsRef> rows;
  rows.reserve(m.rows.size());
  for (const auto& span : m.rows) {
    if (!span.rows) return Status::Corruption("MTP head history without rows");
    rows.push_back({span.rows->bytes, uint32_t(span.n_tokens)});
  }
  const size_t width = size_t(llama_model_n_embd_out(head_.model().raw()));
  PREFIXD_ASSIGN_OR_RETURN(std::vector<float> carry, DecodeCarry(m.snapshot->bytes, width));
  return SetHeadState(seq, rows, int32_t(m.n_tokens), carry);
}

Status MtpSidecar::SetHeadState(int32_t seq, std::span<const RowsRef> rows, int32_t p,
                                const std::vector<float>& carry) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> state, AssembleState(rows, {}, shape_, p));
  PREFIXD_RETURN_IF_ERROR(head_.SetState(seq, state, StatePart::kWhole));
  if (head_.SeqPosMax(seq) != p - 1) return Status::Corruption("MTP head history ends off its position");
  if (!drafter_.SetMtpCarry(seq, carry)) return Status::Internal("MTP head: carry not set");
  return Status::OK();
}

// The carry at P is the hidden row of P - 1, beside the head's row there; the hidden rows of
// P's partial Block go back to the observer, for the publish that completes it.
Status MtpSidecar::SetHistoryWithCarries(int32_t seq, const cache::PrefixCache::Match& m) {
  const size_t width = size_t(llama_model_n_embd_out(head_.model().raw()));
  std::vector<RowsRef> rows;
  rows.reserve(m.rows.size());
  RowsWithCarries last;
  for (const auto& span : m.rows) {
    if (!span.rows) return Status::Corruption("MTP head history without rows");
    PREFIXD_ASSIGN_OR_RETURN(last, UnpackRowsWithCarries(span.rows->bytes, width));
    if (span.n_tokens == 0 || span.n_tokens > last.k) {
      return Status::Corruption("MTP head rows hold fewer tokens than their span");
    }
    rows.push_back({last.rows, uint32_t(span.n_tokens)});
  }
  if (rows.empty()) return Status::Corruption("MTP head history without rows");
  const size_t used = rows.back().n_tokens_used;
  std::vector<float> held(used * width);
  std::memcpy(held.data(), last.carries.data(), held.size() * sizeof(float));
  const std::vector<float> carry(held.end() - ptrdiff_t(width), held.end());
  const int32_t p = int32_t(m.n_tokens);
  PREFIXD_RETURN_IF_ERROR(SetHeadState(seq, rows, p, carry));
  if (p % block_size_ != 0) {  // the last span starts at P's Block
    held.resize(size_t(p % block_size_) * width);
    drafter_.SetMtpHiddenRows(seq, p / block_size_ * block_size_, std::move(held));
  }
  return Status::OK();
}

}  // namespace prefixd::engine
