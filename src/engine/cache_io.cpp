#include "engine/cache_io.h"

#include <algorithm>

#include "engine/disk_restore.h"
#include "engine/mtp_sidecar.h"
#include "engine/prefill.h"
#include "engine/prompt_decode.h"
#include "engine/codec/snapshot_payload.h"
#include "engine/codec/state_codec.h"
#include "util/buffer_pool.h"
#include "util/log.h"

namespace prefixd::engine {

namespace {

using cache::PayloadRef;

using cache::SnapshotKind;

using cache::MakePayload;

CacheMiss MissOf(const cache::PrefixCache::Match& m) {
  return m.n_tokens > 0 ? CacheMiss::kNotMissed : m.reason;
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
  auto by_pos = [](const CapturePoint& a, const CapturePoint& b) {
    return a.pos != b.pos ? a.pos < b.pos : a.kind > b.kind;
  };
  if (options.needs_snapshot) {
    // Every step: a prompt that diverges inside a long message restores at most a step back.
    // One a tile or less from a message point or the end is not on the schedule
    // (PrefillCuts) and FitCapturesToSchedule drops it: the point beside it serves.
    const int32_t step = int32_t(std::max(options.snapshot_spacing, options.block_size));
    for (int32_t b = step; b <= n; b += step) add(b, SnapshotKind::kBlockBoundary);
  }
  // One point per position, keeping the kind worth most to retention.
  std::sort(points.begin(), points.end(), by_pos);
  points.erase(std::unique(points.begin(), points.end(),
                           [](const CapturePoint& a, const CapturePoint& b) { return a.pos == b.pos; }),
               points.end());
  return points;
}

PrefetchResult Prefetch(cache::TieredCache& cache, const Digest& domain,
                        std::span<const Token> tokens, size_t max_len, bool open_disk) {
  cache::TieredCache::Promoted p = cache.Promote(domain, tokens, max_len, open_disk);
  return {p.ram, p.disk, p.remote, std::move(p.opened)};
}

struct CacheIo::Impl {
  Context& ctx;
  cache::TieredCache& cache;
  CacheIoOptions options;
  std::optional<StateShape> shape;  // kSliced: what the codec probe learned
  StatePieces pieces;  // the state a restore sets, as pieces of the payloads; reused
  // The rows a publish reads back, kept for the next one up to kRowsScratchMax bytes: a turn's
  // new rows, whatever their count, land in pages already present.
  std::vector<uint8_t> rows_scratch;
  static constexpr size_t kRowsScratchMax = size_t(128) << 20;
  MtpSidecar* sidecar = nullptr;  // the MTP head's history beside the target's (null: none)

  Impl(Context& c, cache::TieredCache& tc, const CacheIoOptions& o, std::optional<StateShape> s)
      : ctx(c), cache(tc), options(o), shape(std::move(s)) {}

  bool whole() const { return options.mode == StateMode::kWhole; }
  // What a Snapshot holds: the partial state, or in kWhole the whole state, and the cell layout
  // of its sliding-window caches (snapshot_payload.h).
  Result<std::vector<uint8_t>> TakeSnapshot(const Slot& slot) const {
    std::vector<uint8_t> layout;
    PREFIXD_ASSIGN_OR_RETURN(
        std::vector<uint8_t> state,
        ctx.GetState(slot.seq, whole() ? StatePart::kWhole : StatePart::kPartial, &layout));
    return JoinSnapshot(std::move(state), layout);
  }
  // Slices Blocks [from / B, n / B) of `tokens` (n = tokens.size(), all decoded in slot.seq)
  // from one read of the rows [first Block, n) and publishes them, then slot.run.pending.
  Status PublishRange(Slot& slot, std::span<const Token> tokens, int32_t from);
  Status RestoreMatch(const Slot& slot, const cache::PrefixCache::Match& m, uint64_t* bytes);
  struct Held;
  Held HeldPrefix(const Slot& slot, size_t max_len) const;
  Status KeepHeld(const Slot& slot, size_t keep);
  Status RestorePartial(const Slot& slot, const cache::PrefixCache::Match& m, uint64_t* bytes);
  Status CheckPartial(std::span<const uint8_t> partial, size_t p) const;
  Status CheckEndsAt(const Slot& slot, size_t p);
  cache::PrefixCache::Match LookupTiers(const Slot& slot, size_t max_len, size_t good_enough,
                                        CacheTier* tier);
  cache::PrefixCache::Match LookupExact(const Slot& slot, size_t max_len, size_t good_enough,
                                        CacheTier* tier);
  size_t OpenedEnd(const Slot& slot) const;
  // The furthest a restore of the slot's prompt may end: max_len, or with Snapshots captured
  // inside calls, at most the schedule's ResumeLimit.
  size_t ResumeEnd(const Slot& slot, size_t max_len) const {
    if (!options.needs_snapshot || !options.capture_in_call) return max_len;
    return std::min(max_len, size_t(ResumeLimit(slot.run.chunk_ends, options.tiled_from)));
  }
  Status RestoreOpened(const Slot& slot, size_t p, uint64_t* bytes);
  void FitCapturesToSchedule(Restoration& r) const;
  // The MTP head's carry for a Snapshot (empty without a sidecar, or when the head has none).
  std::vector<uint8_t> MtpCarry(const Slot& slot) const;
  int32_t RestoreMtp(const Slot& slot, const Restoration& r) const;
};

std::vector<uint8_t> CacheIo::Impl::MtpCarry(const Slot& slot) const {
  if (sidecar == nullptr) return {};
  Result<std::vector<uint8_t>> carry = sidecar->TakeCarry(slot.seq);
  return carry.ok() ? std::move(carry).value() : std::vector<uint8_t>{};
}

// A slot that kept its sequence kept the head's with it; bytes set into the target's sequence
// cleared the head's (its observer), which gets its history at P from the tiers.
int32_t CacheIo::Impl::RestoreMtp(const Slot& slot, const Restoration& r) const {
  if (sidecar == nullptr || r.restored <= 0) return 0;
  if (r.outcome.tier == CacheTier::kSlot) return r.restored;
  return sidecar->Restore(slot.seq, slot.run.domain, slot.run.job->request.prompt.tokens,
                          r.restored);
}

void CacheIo::AttachMtpSidecar(MtpSidecar* sidecar) { impl_->sidecar = sidecar; }

CacheIo::CacheIo(Context& ctx, cache::TieredCache& cache, const CacheIoOptions& options,
                 std::optional<StateShape> shape)
    : impl_(std::make_unique<Impl>(ctx, cache, options, std::move(shape))) {}
CacheIo::~CacheIo() = default;

Status CacheIo::Impl::RestoreMatch(const Slot& slot, const cache::PrefixCache::Match& m,
                                   uint64_t* bytes) {
  if (whole()) {  // the Snapshot is the whole state at P
    if (!m.snapshot) return Status::Corruption("whole-state match without a snapshot");
    PREFIXD_ASSIGN_OR_RETURN(SnapshotParts snap, SplitSnapshot(m.snapshot->bytes));
    PREFIXD_RETURN_IF_ERROR(ctx.SetState(slot.seq, snap.state, StatePart::kWhole, snap.layout));
    *bytes = m.snapshot->bytes.size();
    return CheckEndsAt(slot, m.n_tokens);
  }
  if (!shape) return Status::Internal("no state shape");
  std::vector<RowsRef> rows;
  rows.reserve(m.rows.size());
  for (const auto& span : m.rows) {
    if (!span.rows) return Status::Corruption("cache match without rows");
    rows.push_back({span.rows->bytes, uint32_t(span.n_tokens)});
  }
  SnapshotParts snap;
  if (m.snapshot) {
    PREFIXD_ASSIGN_OR_RETURN(snap, SplitSnapshot(m.snapshot->bytes));
  }
  // The state is set straight from the payloads (held by `m` until we return): one copy of
  // each row, from the Tier into the KV tensors.
  PREFIXD_RETURN_IF_ERROR(
      AssembleStatePieces(rows, snap.state, *shape, int32_t(m.n_tokens), &pieces));
  Status set = ctx.SetStatePieces(slot.seq, pieces.pieces, pieces.size, {}, {}, snap.layout);
  *bytes = pieces.size;
  PREFIXD_RETURN_IF_ERROR(set);
  return CheckEndsAt(slot, m.n_tokens);
}

// How much of a prompt the slot's sequence can keep as it is (see Slot::held).
struct CacheIo::Impl::Held {
  size_t shared = 0;  // tokens the held sequence shares with the prompt (at most max_len)
  size_t keep = 0;    // of which kept with no bytes restored: any of them for pure attention,
                      // all or nothing where the state is valid at its end only
};

CacheIo::Impl::Held CacheIo::Impl::HeldPrefix(const Slot& slot, size_t max_len) const {
  Held h;
  if (slot.held.domain != slot.run.domain) return h;
  const auto& tokens = slot.run.job->request.prompt.tokens;
  const size_t n = std::min({slot.held.tokens.size(), tokens.size(), max_len});
  while (h.shared < n && slot.held.tokens[h.shared] == tokens[h.shared]) ++h.shared;
  // Pure attention keeps a prefix a cold run's schedule continues from exactly; a state valid
  // only at its end is kept whole: it ends with an answer decoded one token at a time, which
  // no schedule makes equal to a cold run (docs/architecture.md, "The chunk schedule").
  if (!options.needs_snapshot) {
    h.keep = size_t(ExactRestoreFloor(slot.run.chunk_ends, int32_t(h.shared), options.tiled_from));
  }
  if (options.needs_snapshot && h.shared == slot.held.tokens.size() &&
      h.shared <= ResumeEnd(slot, max_len)) {
    h.keep = h.shared;
  }
  return h;
}

// Keeps the first `keep` held tokens: the tail of pure-attention rows is cut off.
Status CacheIo::Impl::KeepHeld(const Slot& slot, size_t keep) {
  if (keep < slot.held.tokens.size() && !ctx.SeqTruncate(slot.seq, int32_t(keep))) {
    return Status::Internal("cannot cut the held sequence at " + std::to_string(keep));
  }
  return CheckEndsAt(slot, keep);
}

// The slot holds the rows of [0, P) already: sets only the Snapshot's partial state (recurrent
// or SWA) taken at P and cuts the rows after P. The bytes moved are the partial's alone.
Status CacheIo::Impl::RestorePartial(const Slot& slot, const cache::PrefixCache::Match& m,
                                     uint64_t* bytes) {
  if (!m.snapshot) return Status::Internal("partial restore without a snapshot");
  PREFIXD_ASSIGN_OR_RETURN(SnapshotParts snap, SplitSnapshot(m.snapshot->bytes));
  PREFIXD_RETURN_IF_ERROR(CheckPartial(snap.state, m.n_tokens));
  PREFIXD_RETURN_IF_ERROR(ctx.SetState(slot.seq, snap.state, StatePart::kPartial, snap.layout));
  *bytes = m.snapshot->bytes.size();
  if (!ctx.SeqTruncate(slot.seq, int32_t(m.n_tokens))) {
    return Status::Internal("cannot cut the held rows at " + std::to_string(m.n_tokens));
  }
  return CheckEndsAt(slot, m.n_tokens);
}

// The partial section must be one a state taken at exactly P would have.
Status CacheIo::Impl::CheckPartial(std::span<const uint8_t> partial, size_t p) const {
  if (!shape) return Status::Internal("no state shape");
  return CheckPartialState(partial, *shape, int32_t(p));
}

Status CacheIo::Impl::CheckEndsAt(const Slot& slot, size_t p) {
  if (ctx.SeqPosMax(slot.seq) == int32_t(p) - 1) return Status::OK();
  const int32_t got = ctx.SeqPosMax(slot.seq);
  ctx.SeqClear(slot.seq);
  return Status::Corruption("restored sequence ends at " + std::to_string(got) + ", expected " +
                            std::to_string(int64_t(p) - 1));
}

namespace {

// The tier a prefetch read a prefix of `n` tokens from (kRam: it was in RAM already).
CacheTier PrefetchedTier(const PrefetchResult& pre, size_t n) {
  const size_t local = std::max(pre.ram_tokens, pre.disk_tokens);
  if (pre.remote_tokens > local && n > local) return CacheTier::kRemote;
  if (pre.disk_tokens > pre.ram_tokens && n > pre.ram_tokens) return CacheTier::kDisk;
  return CacheTier::kRam;
}

}  // namespace

// The longest restorable prefix in the local tiers (RAM, then disk, promoted into RAM). Bytes
// the prefetch read into RAM for this request count for the tier they came from.
cache::PrefixCache::Match CacheIo::Impl::LookupTiers(const Slot& slot, size_t max_len,
                                                      size_t good_enough, CacheTier* tier) {
  const auto& tokens = slot.run.job->request.prompt.tokens;
  // The prefetch walked the disk already when it opened a prefix there: RAM only, so the
  // worker does not read into RAM what it is about to read straight from the files.
  const cache::Reach reach = OpenedEnd(slot) > 0 ? cache::Reach::kRam : cache::Reach::kLocal;
  cache::TieredCache::Found f = cache.Lookup(slot.run.domain, tokens, max_len, good_enough, reach);
  *tier = f.tier == CacheTier::kDisk ? CacheTier::kDisk
                                     : PrefetchedTier(slot.run.job->prefetch, f.match.n_tokens);
  return std::move(f.match);
}

// The longest prefix in the tiers. For rows (pure attention), one a warm prefill continues from
// exactly as a cold run (ExactRestoreFloor of the slot's chunk schedule): a match that is not is
// looked up again, shorter. A Snapshot is taken where it is: one at another prompt's boundary
// variant, a token or a few off this prompt's planned ends, continues in calls of another class
// (last bits, docs/architecture.md), but falling back would lose the reuse the real-template
// tests prove.
// Captured inside calls, a Snapshot past the prompt's ResumeLimit is looked up again, shorter.
cache::PrefixCache::Match CacheIo::Impl::LookupExact(const Slot& slot, size_t max_len,
                                                      size_t good_enough, CacheTier* tier) {
  cache::PrefixCache::Match m = LookupTiers(slot, max_len, good_enough, tier);
  const size_t diverged = m.diverged_at;
  if (options.needs_snapshot) {
    const size_t limit = ResumeEnd(slot, max_len);
    if (m.n_tokens <= limit) return m;
    m = LookupTiers(slot, limit, std::min(good_enough, limit), tier);
    m.diverged_at = std::max(m.diverged_at, diverged);
    return m;
  }
  for (;;) {
    const int32_t p = int32_t(m.n_tokens);
    const int32_t exact = ExactRestoreFloor(slot.run.chunk_ends, p, options.tiled_from);
    if (exact == p) break;
    m = LookupTiers(slot, size_t(exact), good_enough, tier);
  }
  m.diverged_at = std::max(m.diverged_at, diverged);
  return m;
}

// How much of the prompt the prefix the prefetch opened on disk restores: all of it when the
// model needs a Snapshot (which is at its end); for rows only, where the prompt's chunk
// schedule continues exactly as a cold run (ExactRestoreFloor). 0: none opened.
size_t CacheIo::Impl::OpenedEnd(const Slot& slot) const {
  const auto& opened = slot.run.job->prefetch.opened;
  if (!opened || !shape) return 0;
  const int32_t p = int32_t(opened->n_tokens);
  if (options.needs_snapshot) return size_t(p) <= ResumeEnd(slot, size_t(p)) ? size_t(p) : 0;
  return size_t(ExactRestoreFloor(slot.run.chunk_ends, p, options.tiled_from));
}

Status CacheIo::Impl::RestoreOpened(const Slot& slot, size_t p, uint64_t* bytes) {
  const cache::OpenedPrefix& opened = *slot.run.job->prefetch.opened;
  size_t set = 0;
  Status st = SetOpenedPrefix(ctx, slot.seq, opened, p, *shape, cache, &pieces, &set);
  *bytes = set;
  PREFIXD_RETURN_IF_ERROR(st);
  return CheckEndsAt(slot, p);
}

// Cuts the slot's schedule at each capture point that needs a Snapshot there, where that keeps
// every call's class (SplitChunkAt); drops the points it cannot cut at (a branch point a few
// tokens from a planned end): they would change how the rows around them compute. Captured
// inside calls, the schedule stays and every point is kept: one past this prompt's ResumeLimit
// serves the longer prompts that extend it.
void CacheIo::Impl::FitCapturesToSchedule(Restoration& r) const {
  if (!options.needs_snapshot || options.capture_in_call) return;  // Tails: sliced anywhere
  std::erase_if(r.captures, [&](const CapturePoint& c) {
    return !SplitChunkAt(r.chunk_ends, c.pos, options.tiled_from);
  });
}

// Three ways, cheapest first: keep what the slot holds (0 bytes); set only a Snapshot's
// partial into a slot that holds its rows; assemble the whole prefix from the tiers.
Restoration CacheIo::Restore(const Slot& slot) {
  const Prompt& prompt = slot.run.job->request.prompt;
  const size_t max_len = prompt.tokens.size() - 1;
  const Impl::Held held = impl_->HeldPrefix(slot, max_len);
  CacheTier tier = CacheTier::kRam;
  cache::PrefixCache::Match m = impl_->LookupExact(slot, max_len, held.keep, &tier);
  const size_t opened = impl_->OpenedEnd(slot);
  Restoration r;
  CacheOutcome& out = r.outcome;
  const size_t reusable = std::max({m.diverged_at, held.shared, opened});
  out.reusable_tokens = int32_t(std::min(reusable, max_len));
  out.diverged_at = reusable < prompt.tokens.size() ? int32_t(reusable) : -1;
  Status st = Status::OK();
  if (held.keep > 0 && held.keep >= std::max(m.n_tokens, opened)) {
    st = impl_->KeepHeld(slot, held.keep);
    if (st.ok()) r.restored = int32_t(held.keep), out.tier = CacheTier::kSlot;
  } else if (opened > m.n_tokens && opened <= held.shared && impl_->options.needs_snapshot) {
    // The slot holds the rows: only the Snapshot the prefetch read is set.
    cache::PrefixCache::Match partial;
    partial.n_tokens = opened;
    partial.snapshot = slot.run.job->prefetch.opened->snapshot;
    st = impl_->RestorePartial(slot, partial, &r.restored_bytes);
    if (st.ok()) r.restored = int32_t(opened), out.tier = CacheTier::kDisk;
  } else if (opened > m.n_tokens) {
    impl_->ctx.SeqClear(slot.seq);
    st = impl_->RestoreOpened(slot, opened, &r.restored_bytes);
    if (st.ok()) r.restored = int32_t(opened), out.tier = CacheTier::kDisk;
  } else if (m.n_tokens > 0 && m.n_tokens <= held.shared && impl_->options.has_rows &&
             impl_->options.needs_snapshot) {
    st = impl_->RestorePartial(slot, m, &r.restored_bytes);
    if (st.ok()) r.restored = int32_t(m.n_tokens), out.tier = tier;
  } else {
    impl_->ctx.SeqClear(slot.seq);
    if (m.n_tokens > 0) st = impl_->RestoreMatch(slot, m, &r.restored_bytes);
    if (m.n_tokens > 0 && st.ok()) r.restored = int32_t(m.n_tokens), out.tier = tier;
    if (m.n_tokens == 0) out.miss = MissOf(m);
  }
  if (!st.ok()) {
    impl_->ctx.SeqClear(slot.seq);  // fail closed: prefill cold
    r.restored = 0;
    out.tier = CacheTier::kNone;
    out.miss = CacheMiss::kRestoreFailed;
    Logf(LogLevel::kWarning, "restore of %zu tokens refused: %s",
         std::max({m.n_tokens, held.keep, opened}),
         st.ToString().c_str());
  }
  r.mtp_restored = impl_->RestoreMtp(slot, r);
  r.captures = PlanCaptures(prompt, r.restored, out.diverged_at, impl_->options);
  r.chunk_ends = slot.run.chunk_ends;
  impl_->FitCapturesToSchedule(r);
  if (impl_->options.capture_in_call && r.restored > 0) {
    // A Snapshot taken inside a call: the calls after it re-tiled (else, as at another
    // prompt's boundary variant, the first call is of another class: the last bits may differ).
    if (auto resumed = ResumeChunks(r.chunk_ends, r.restored, impl_->ctx.n_batch(),
                                    impl_->ctx.n_ubatch(), impl_->options.tiled_from)) {
      r.chunk_ends = std::move(*resumed);
      // The image bounds stay call ends (prompt_decode.h): a call's captures are set for one
      // llama_decode, which an image inside it would split.
      const std::vector<int32_t> images = ImageCuts(prompt);
      r.chunk_ends.insert(r.chunk_ends.end(), images.begin(), images.end());
      std::sort(r.chunk_ends.begin(), r.chunk_ends.end());
      r.chunk_ends.erase(std::unique(r.chunk_ends.begin(), r.chunk_ends.end()), r.chunk_ends.end());
    }
  }
  return r;
}

bool CacheIo::capture_in_call() const { return impl_->options.capture_in_call; }

Status CacheIo::Capture(Slot& slot, const CapturePoint& point, int32_t in_call) {
  PendingSnapshot snap{point.pos, point.kind, {}, {}};
  if (impl_->options.needs_snapshot && point.pos == slot.run.pos) {
    PREFIXD_ASSIGN_OR_RETURN(snap.partial, impl_->TakeSnapshot(slot));
    snap.mtp_carry = impl_->MtpCarry(slot);
  } else if (impl_->options.needs_snapshot) {
    if (!impl_->options.capture_in_call || impl_->whole() || in_call < 0) {
      return Status::Internal("capture point off the chunk schedule");
    }
    std::vector<uint8_t> layout;
    PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> state, impl_->ctx.CallCapture(in_call, &layout));
    snap.partial = JoinSnapshot(std::move(state), layout);
  }
  slot.run.pending.push_back(std::move(snap));
  return Status::OK();
}

Status CacheIo::Publish(Slot& slot) {
  const auto& tokens = slot.run.job->request.prompt.tokens;
  // For pure attention the whole prompt is a Tail: any later prefix of it is restorable.
  const bool attention_only = impl_->options.has_rows && !impl_->options.needs_snapshot;
  if (attention_only && tokens.size() % impl_->options.block_size != 0) {
    slot.run.pending.push_back({int32_t(tokens.size()), SnapshotKind::kGenerationEnd, {}, {}});
  }
  return impl_->PublishRange(slot, tokens, slot.run.restored);
}

Status CacheIo::PublishGeneration(Slot& slot, std::span<const Token> generated) {
  const auto& prompt = slot.run.job->request.prompt.tokens;
  const int32_t n = int32_t(prompt.size());
  if (slot.run.pos <= n) return Status::OK();  // nothing generated was decoded
  std::vector<Token> tokens(prompt);
  if (size_t(slot.run.pos - n) > generated.size()) return Status::Internal("generation: short");
  tokens.insert(tokens.end(), generated.begin(), generated.begin() + (slot.run.pos - n));
  slot.run.pending.clear();
  PendingSnapshot end{slot.run.pos, SnapshotKind::kGenerationEnd, {}, {}};
  if (impl_->options.needs_snapshot) {
    PREFIXD_ASSIGN_OR_RETURN(end.partial, impl_->TakeSnapshot(slot));
    end.mtp_carry = impl_->MtpCarry(slot);
  }
  if (impl_->options.has_rows || impl_->options.needs_snapshot) slot.run.pending.push_back(std::move(end));
  return impl_->PublishRange(slot, tokens, n);
}

Status CacheIo::Impl::PublishRange(Slot& slot, std::span<const Token> tokens, int32_t from) {
  const int32_t n = int32_t(tokens.size());
  const int32_t B = int32_t(options.block_size);
  // Blocks: every full Block from the one `from` falls in. Every row published (Blocks, and the
  // Tails of the pending Snapshots, which all start at or after that Block) lies in
  // [first * B, n): only those rows are read, never the whole context.
  const int32_t first = from / B;
  std::vector<uint8_t> state;
  std::optional<ParsedState> parsed;
  if (options.has_rows && first * B < n) {
    PREFIXD_ASSIGN_OR_RETURN(state,
                             ctx.GetStateRange(slot.seq, first * B, n, std::move(rows_scratch)));
    PREFIXD_ASSIGN_OR_RETURN(ParsedState p, ParseState(state, ctx.model().state_format()));
    parsed = std::move(p);
  }
  std::vector<PayloadRef> rows;
  for (int32_t k = first; (k + 1) * B <= n; ++k) {
    if (!options.has_rows) {
      rows.push_back(nullptr);
      continue;
    }
    PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(*parsed, k * B, (k + 1) * B));
    rows.push_back(MakePayload(std::move(r)));
  }
  if (!rows.empty()) cache.InsertBlocks(slot.run.domain, tokens, size_t(first), rows);
  rows.clear();  // the cache may evict what nobody else holds
  // Snapshots and Tails, after the Blocks they depend on.
  for (PendingSnapshot& s : slot.run.pending) {
    PayloadRef tail;
    if (parsed && s.pos % B != 0) {
      PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(*parsed, s.pos / B * B, s.pos));
      tail = MakePayload(std::move(r));
    }
    PayloadRef snap = s.partial.empty() ? nullptr : MakePayload(std::move(s.partial));
    if (!snap && !tail) continue;
    std::span<const Token> prefix = tokens.first(size_t(s.pos));
    cache.InsertSnapshot(slot.run.domain, prefix, s.kind, snap, tail);
  }
  parsed.reset();  // its views of `state` end here
  if (state.capacity() <= kRowsScratchMax) {
    rows_scratch = std::move(state);
  } else {
    BufferPool::Shared().Give(std::move(state));
  }
  if (sidecar != nullptr) {  // the head's history is worth drafts, not reuse: never an error
    Status st = sidecar->Publish(slot.seq, slot.run.domain, tokens, from, slot.run.pending);
    if (!st.ok()) Logf(LogLevel::kWarning, "MTP head history not published: %s", st.ToString().c_str());
  }
  slot.run.pending.clear();
  return Status::OK();
}

}  // namespace prefixd::engine
