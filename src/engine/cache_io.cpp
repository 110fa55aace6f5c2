#include "engine/cache_io.h"

#include <algorithm>
#include <cstdio>

#include "engine/state_codec.h"

namespace prefixd::engine {

namespace {

using cache::PayloadRef;

// A restore buffer larger than this is released after use rather than kept for the next one.
constexpr size_t kMaxScratchBytes = size_t(512) << 20;
using cache::SnapshotKind;

PayloadRef MakePayload(std::vector<uint8_t> bytes) {
  auto p = std::make_shared<cache::Payload>();
  p->bytes = std::move(bytes);
  return p;
}

std::string MissReasonText(const cache::PrefixCache::Match& m) {
  if (m.n_tokens > 0) return "";
  return cache::MissReasonName(m.reason);
}

}  // namespace

std::vector<CapturePoint> PlanCaptures(const Prompt& prompt, int32_t restored, int32_t branch,
                                       const CacheIoOptions& options) {
  const int32_t n = int32_t(prompt.tokens.size());
  std::vector<CapturePoint> points;
  auto add = [&](int32_t pos, SnapshotKind kind) {
    if (pos > restored && pos <= n) points.push_back({pos, kind});
  };
  for (size_t i = 0; i < prompt.capture_points.size(); ++i) {
    const bool last = i + 1 == prompt.capture_points.size();
    add(prompt.capture_points[i], last ? SnapshotKind::kTail : SnapshotKind::kMessage);
  }
  add(branch, SnapshotKind::kBranch);
  // The prompt's end (no extra chunk: the prefill ends there anyway): a next turn that keeps
  // this exchange in history restores all of this prompt. Not n - 1, which would cost a
  // forward pass on every request to spare an exact repeat the few tokens after the tail.
  // (Pure attention needs no Snapshot: the Tail published at n covers any position.)
  if (options.needs_snapshot) add(n, SnapshotKind::kGenerationEnd);
  if (options.needs_snapshot) {
    for (int32_t b = int32_t(options.block_size); b <= n; b += int32_t(options.block_size)) {
      add(b, SnapshotKind::kBlockBoundary);
    }
  }
  // One point per position, keeping the kind worth most to retention.
  std::sort(points.begin(), points.end(), [](const CapturePoint& a, const CapturePoint& b) {
    return a.pos != b.pos ? a.pos < b.pos : a.kind > b.kind;
  });
  points.erase(std::unique(points.begin(), points.end(),
                           [](const CapturePoint& a, const CapturePoint& b) { return a.pos == b.pos; }),
               points.end());
  return points;
}

struct CacheIo::Impl {
  Context& ctx;
  cache::PrefixCache& cache;
  cache::DiskTier* disk;
  CacheIoOptions options;
  std::optional<StateShape> shape;  // learned once from a one-token state
  Status shape_status;
  std::vector<uint8_t> scratch;  // assembled state bytes, reused across restores

  Impl(Context& c, cache::PrefixCache& pc, cache::DiskTier* d, const CacheIoOptions& o)
      : ctx(c), cache(pc), disk(d), options(o) {}

  Status LearnShape(int32_t seq);
  // Slices Blocks [from / B, n / B) of `tokens` (n = tokens.size(), all decoded in slot.seq)
  // from one whole state and publishes them, then slot.pending.
  Status PublishRange(Slot& slot, std::span<const Token> tokens, int32_t from);
  Status RestoreMatch(Slot& slot, const cache::PrefixCache::Match& m);
};

CacheIo::CacheIo(Context& ctx, cache::PrefixCache& cache, cache::DiskTier* disk,
                 const CacheIoOptions& options)
    : impl_(std::make_unique<Impl>(ctx, cache, disk, options)) {}
CacheIo::~CacheIo() = default;

// Decodes one token into the (empty) sequence to learn the state's shape, then clears it.
Status CacheIo::Impl::LearnShape(int32_t seq) {
  Token one[1] = {0};
  PREFIXD_RETURN_IF_ERROR(ctx.DecodeChunk(seq, one, 0, false));
  auto whole = ctx.GetState(seq, StatePart::kWhole);
  ctx.SeqClear(seq);
  if (!whole.ok()) return whole.status();
  PREFIXD_ASSIGN_OR_RETURN(ParsedState parsed, ParseState(*whole, ctx.model().layout(), ctx.model().has_cell_ext()));
  PREFIXD_ASSIGN_OR_RETURN(StateShape s, StateShapeOf(parsed));
  shape = std::move(s);
  return Status::OK();
}

Status CacheIo::Init(int32_t seq) {
  impl_->shape_status = impl_->LearnShape(seq);
  return impl_->shape_status;
}

Status CacheIo::Impl::RestoreMatch(Slot& slot, const cache::PrefixCache::Match& m) {
  if (!shape) {
    return shape_status.ok() ? Status::Internal("no state shape") : shape_status;
  }
  std::vector<RowsRef> rows;
  rows.reserve(m.rows.size());
  for (const auto& span : m.rows) {
    if (!span.rows) return Status::Corruption("cache match without rows");
    rows.push_back({span.rows->bytes, uint32_t(span.n_tokens)});
  }
  std::span<const uint8_t> partial;
  if (m.snapshot) partial = m.snapshot->bytes;
  std::vector<uint8_t>& bytes = scratch;
  PREFIXD_RETURN_IF_ERROR(AssembleStateInto(rows, partial, *shape, int32_t(m.n_tokens), &bytes));
  Status set = ctx.SetState(slot.seq, bytes, StatePart::kWhole);
  slot.result.usage.restored_bytes = bytes.size();
  if (bytes.capacity() > kMaxScratchBytes) std::vector<uint8_t>().swap(bytes);
  PREFIXD_RETURN_IF_ERROR(set);
  if (ctx.SeqPosMax(slot.seq) != int32_t(m.n_tokens) - 1) {
    ctx.SeqClear(slot.seq);
    return Status::Corruption("restored sequence ends at " + std::to_string(ctx.SeqPosMax(slot.seq)) +
                              ", expected " + std::to_string(m.n_tokens - 1));
  }
  return Status::OK();
}

void CacheIo::Restore(Slot& slot) {
  const Prompt& prompt = slot.job->request.prompt;
  const auto& tokens = prompt.tokens;
  const size_t max_len = tokens.size() - 1;
  cache::PrefixCache::Match m = impl_->cache.Lookup(slot.domain, tokens, max_len);
  CacheOutcome& out = slot.result.cache;
  const char* tier = "ram";
  if (impl_->disk && m.n_tokens < max_len &&
      impl_->disk->Promote(slot.domain, tokens, max_len, m) > m.n_tokens) {
    size_t diverged = m.diverged_at;
    m = impl_->cache.Lookup(slot.domain, tokens, max_len);
    m.diverged_at = std::max(m.diverged_at, diverged);
    tier = "disk";
  }
  out.reusable_tokens = int32_t(std::min(m.diverged_at, tokens.size() - 1));
  out.diverged_at = m.diverged_at < tokens.size() ? int32_t(m.diverged_at) : -1;
  slot.restored = 0;
  if (m.n_tokens > 0) {
    Status st = impl_->RestoreMatch(slot, m);
    if (st.ok()) {
      slot.restored = int32_t(m.n_tokens);
      out.tier = tier;
    } else {
      impl_->ctx.SeqClear(slot.seq);  // fail closed: prefill cold
      out.miss_reason = "restore_failed";
      std::fprintf(stderr, "prefixd: restore of %zu tokens refused: %s\n", m.n_tokens,
                   st.ToString().c_str());
    }
  } else {
    out.miss_reason = MissReasonText(m);
  }
  slot.pos = slot.restored;
  slot.captures = PlanCaptures(prompt, slot.restored, out.diverged_at, impl_->options);
  slot.next_capture = 0;
}

Status CacheIo::Capture(Slot& slot, const CapturePoint& point) {
  PendingSnapshot snap{point.pos, point.kind, {}};
  if (impl_->options.needs_snapshot) {
    PREFIXD_ASSIGN_OR_RETURN(snap.partial, impl_->ctx.GetState(slot.seq, StatePart::kPartial));
  }
  slot.pending.push_back(std::move(snap));
  return Status::OK();
}

Status CacheIo::Publish(Slot& slot) {
  const auto& tokens = slot.job->request.prompt.tokens;
  // For pure attention the whole prompt is a Tail: any later prefix of it is restorable.
  const bool attention_only = impl_->options.has_rows && !impl_->options.needs_snapshot;
  if (attention_only && tokens.size() % impl_->options.block_size != 0) {
    slot.pending.push_back({int32_t(tokens.size()), SnapshotKind::kGenerationEnd, {}});
  }
  return impl_->PublishRange(slot, tokens, slot.restored);
}

Status CacheIo::PublishGeneration(Slot& slot, std::span<const Token> generated) {
  const auto& prompt = slot.job->request.prompt.tokens;
  const int32_t n = int32_t(prompt.size());
  if (slot.pos <= n) return Status::OK();  // nothing generated was decoded
  std::vector<Token> tokens(prompt);
  if (size_t(slot.pos - n) > generated.size()) return Status::Internal("generation: short");
  tokens.insert(tokens.end(), generated.begin(), generated.begin() + (slot.pos - n));
  slot.pending.clear();
  PendingSnapshot end{slot.pos, SnapshotKind::kGenerationEnd, {}};
  if (impl_->options.needs_snapshot) {
    PREFIXD_ASSIGN_OR_RETURN(end.partial, impl_->ctx.GetState(slot.seq, StatePart::kPartial));
  }
  if (impl_->options.has_rows || impl_->options.needs_snapshot) slot.pending.push_back(std::move(end));
  return impl_->PublishRange(slot, tokens, n);
}

Status CacheIo::Impl::PublishRange(Slot& slot, std::span<const Token> tokens, int32_t from) {
  const int32_t n = int32_t(tokens.size());
  const int32_t B = int32_t(options.block_size);
  std::vector<uint8_t> whole;
  std::optional<ParsedState> parsed;
  if (options.has_rows) {
    PREFIXD_ASSIGN_OR_RETURN(whole, ctx.GetState(slot.seq, StatePart::kWhole));
    PREFIXD_ASSIGN_OR_RETURN(ParsedState p, ParseState(whole, ctx.model().layout(),
                                                       ctx.model().has_cell_ext()));
    parsed = std::move(p);
  }
  // Blocks: every full Block from the one `from` falls in.
  const int32_t first = from / B;
  std::vector<PayloadRef> rows;
  for (int32_t k = first; (k + 1) * B <= n; ++k) {
    if (!options.has_rows) {
      rows.push_back(nullptr);
      continue;
    }
    PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(*parsed, k * B, (k + 1) * B));
    rows.push_back(MakePayload(std::move(r)));
  }
  if (!rows.empty()) {
    cache.InsertBlocks(slot.domain, tokens, size_t(first), rows);
    if (disk) disk->SpillBlocks(slot.domain, tokens, size_t(first), rows);
  }
  rows.clear();  // the cache may evict what nobody else holds
  // Snapshots and Tails, after the Blocks they depend on.
  for (PendingSnapshot& s : slot.pending) {
    PayloadRef tail;
    if (options.has_rows && s.pos % B != 0) {
      PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(*parsed, s.pos / B * B, s.pos));
      tail = MakePayload(std::move(r));
    }
    PayloadRef snap = s.partial.empty() ? nullptr : MakePayload(std::move(s.partial));
    if (!snap && !tail) continue;
    std::span<const Token> prefix = tokens.first(size_t(s.pos));
    cache.InsertSnapshot(slot.domain, prefix, s.kind, snap, tail);
    if (disk) disk->SpillSnapshot(slot.domain, prefix, s.kind, snap, tail);
  }
  slot.pending.clear();
  return Status::OK();
}

}  // namespace prefixd::engine
