#include "engine/draft_history.h"

#include <cstring>
#include <vector>

#include "engine/context.h"
#include "engine/model/model.h"
#include "util/log.h"

namespace prefixd::engine {

namespace {

// The marker Snapshot a restore point of the draft's history carries where the cache needs one
// (its bytes are checked, not used: the rows are the whole state).
constexpr char kMarker[] = "prefixd draft history v1";

std::vector<uint8_t> MarkerBytes() { return std::vector<uint8_t>(kMarker, kMarker + sizeof kMarker); }

// Two tokens decoded into `seq`, their state parsed: the shape every later state of the draft
// has. Leaves `seq` empty.
Result<StateShape> ProbeDraftShape(Context& draft, const StateFormat& format, int32_t seq) {
  draft.SeqClear(seq);
  const std::vector<Token> probe = {0, 0};
  Status st = draft.DecodeChunk(seq, probe, 0, false);
  Result<std::vector<uint8_t>> state =
      st.ok() ? draft.GetState(seq, StatePart::kWhole) : Result<std::vector<uint8_t>>(st);
  draft.SeqClear(seq);
  if (!state.ok()) return state.status();
  PREFIXD_ASSIGN_OR_RETURN(ParsedState parsed, ParseState(*state, format));
  return StateShapeOf(parsed);
}

}  // namespace

Result<std::unique_ptr<DraftHistory>> DraftHistory::Create(Context& draft, const Digest& draft_id,
                                                           cache::TieredCache& cache,
                                                           uint32_t block_size, int32_t probe_seq) {
  const StateFormat& format = draft.model().state_format();
  if (format.layout != MemoryLayout::kAttention) {
    return Status::NotSupported(std::string("the draft model's ") +
                                MemoryLayoutName(format.layout) +
                                " memory keeps a window, not the whole history");
  }
  if (!cache.ram().options().has_rows) {
    return Status::NotSupported("the cache keeps whole states, not rows");
  }
  PREFIXD_ASSIGN_OR_RETURN(StateShape shape, ProbeDraftShape(draft, format, probe_seq));
  return std::unique_ptr<DraftHistory>(
      new DraftHistory(draft, draft_id, cache, block_size, std::move(shape), format));
}

DraftHistory::DraftHistory(Context& draft, const Digest& draft_id, cache::TieredCache& cache,
                           uint32_t block_size, StateShape shape, StateFormat format)
    : draft_(draft), draft_id_(draft_id), cache_(cache), block_size_(int32_t(block_size)),
      shape_(std::move(shape)), format_(format),
      needs_marker_(cache.ram().options().needs_snapshot) {}

DraftHistory::~DraftHistory() = default;

Digest DraftHistory::DomainOf(const Digest& draft_id, const Digest& domain) {
  Sha256 h;
  h.Update("prefixd draft model history v1");
  h.Update(draft_id.data(), draft_id.size());
  h.Update(domain.data(), domain.size());
  return h.Finish();
}

Status DraftHistory::Publish(int32_t seq, const Digest& domain, std::span<const Token> tokens,
                             int32_t from) {
  const int32_t n = int32_t(tokens.size());
  const int32_t B = block_size_;
  const int32_t first = from / B, end = n / B;
  if (first >= end || draft_.SeqPosMax(seq) < n - 1) return Status::OK();
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> state, draft_.GetStateRange(seq, first * B, end * B));
  PREFIXD_ASSIGN_OR_RETURN(ParsedState parsed, ParseState(state, format_));
  if (!HoldsRowsExactly(parsed, first * B, end * B)) return Status::OK();
  const Digest d = DomainOf(draft_id_, domain);
  std::vector<cache::PayloadRef> rows;
  for (int32_t k = first; k < end; ++k) {
    PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(parsed, k * B, (k + 1) * B));
    rows.push_back(cache::MakePayload(std::move(r)));
  }
  cache_.InsertBlocks(d, tokens, size_t(first), rows);
  if (needs_marker_) {
    // kMessage: every lower tier keeps it (block-boundary Snapshots go down only now and then).
    cache_.InsertSnapshot(d, tokens.first(size_t(end * B)), cache::SnapshotKind::kMessage,
                          cache::MakePayload(MarkerBytes()), nullptr);
  }
  return Status::OK();
}

int32_t DraftHistory::Restore(int32_t seq, const Digest& domain, std::span<const Token> tokens,
                              int32_t held) {
  if (int32_t(tokens.size()) < held + block_size_) return held;
  cache::TieredCache::Found f =
      cache_.Lookup(DomainOf(draft_id_, domain), tokens, tokens.size(), tokens.size(), cache::Reach::kLocal);
  const cache::PrefixCache::Match& m = f.match;
  if (int32_t(m.n_tokens) <= held) return held;
  Status st = Status::OK();
  if (needs_marker_ && (!m.snapshot || m.snapshot->bytes != MarkerBytes())) {
    st = Status::Corruption("draft history without its marker");
  }
  std::vector<RowsRef> rows;
  for (const auto& span : m.rows) {
    if (!span.rows) st = Status::Corruption("draft history without rows");
    if (!st.ok()) break;
    rows.push_back({span.rows->bytes, uint32_t(span.n_tokens)});
  }
  draft_.SeqClear(seq);
  if (st.ok()) {
    Result<std::vector<uint8_t>> state = AssembleState(rows, {}, shape_, int32_t(m.n_tokens));
    st = state.ok() ? draft_.SetState(seq, *state, StatePart::kWhole) : state.status();
  }
  if (st.ok() && draft_.SeqPosMax(seq) != int32_t(m.n_tokens) - 1) {
    st = Status::Corruption("draft history ends off its position");
  }
  if (!st.ok()) {
    draft_.SeqClear(seq);
    Logf(LogLevel::kWarning, "draft model history at %zu refused: %s", m.n_tokens,
         st.ToString().c_str());
    return 0;
  }
  restored_tokens_ += m.n_tokens - size_t(held);
  return int32_t(m.n_tokens);
}

}  // namespace prefixd::engine
