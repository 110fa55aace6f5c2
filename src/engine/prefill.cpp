#include "engine/prefill.h"

#include <algorithm>

namespace prefixd::engine {

int32_t NextChunkEnd(int32_t pos, int32_t limit, uint32_t n_batch, uint32_t n_ubatch) {
  const int32_t len = limit - pos;
  const int32_t most = int32_t(std::min(n_batch, n_ubatch));
  if (len <= most || len - most >= kMinCallRows || most <= 2 * kMinCallRows) {
    return pos + std::min(len, most);
  }
  // The rest after a full call would be short: end this call on a whole number of tiles
  // that leaves the rest at least kMinCallRows.
  return pos + (len - kMinCallRows) / kMinCallRows * kMinCallRows;
}

CallClass ClassOf(int32_t rows, int32_t tiled_from) {
  if (rows >= tiled_from) return CallClass::kTiled;
  return rows >= 2 ? CallClass::kShort : CallClass::kSingle;
}

namespace {

// The capture points inside (0, n), ascending and unique.
std::vector<int32_t> PointsInside(int32_t n, std::span<const int32_t> capture_points) {
  std::vector<int32_t> points;
  for (int32_t p : capture_points) {
    if (p > 0 && p < n) points.push_back(p);
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  return points;
}

}  // namespace

std::vector<int32_t> PrefillCuts(int32_t n, std::span<const int32_t> capture_points,
                                 uint32_t spacing) {
  const std::vector<int32_t> points = PointsInside(n, capture_points);
  // The grid, except a tile or less from a message point or from the prompt's end: there the
  // message point (or the end) serves the restore as well.
  std::vector<int32_t> cuts = points;
  for (int64_t b = spacing; b + kMinCallRows <= n; b += spacing) {
    auto next = std::lower_bound(points.begin(), points.end(), int32_t(b));
    const bool near_next = next != points.end() && *next - b < kMinCallRows;
    const bool near_prev = next != points.begin() && b - *(next - 1) < kMinCallRows;
    if (!near_next && !near_prev) cuts.push_back(int32_t(b));
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

int32_t ResumeLimit(std::span<const int32_t> ends, int32_t tiled_from) {
  const int32_t e = ends.back();
  const int32_t s = ends.size() > 1 ? ends[ends.size() - 2] : 0;
  return ClassOf(e - s, tiled_from) == CallClass::kTiled ? e - tiled_from : s;
}

std::vector<int32_t> PlanChunks(int32_t n, std::span<const int32_t> cuts, uint32_t n_batch,
                                uint32_t n_ubatch) {
  std::vector<int32_t> ends;
  int32_t pos = 0;
  auto fill_to = [&](int32_t limit) {
    while (pos < limit) {
      pos = NextChunkEnd(pos, limit, n_batch, n_ubatch);
      ends.push_back(pos);
    }
  };
  for (int32_t c : cuts) fill_to(c);
  fill_to(n);
  return ends;
}

int32_t NextPlannedEnd(std::span<const int32_t> ends, int32_t pos) {
  return *std::upper_bound(ends.begin(), ends.end(), pos);
}

namespace {

// The fewest rows a call of class `c` has.
int32_t MinRows(CallClass c, int32_t tiled_from) {
  switch (c) {
    case CallClass::kTiled: return tiled_from;
    case CallClass::kShort: return 2;
    case CallClass::kSingle: return 1;
  }
  return 1;
}

// The planned call [s, e) that holds position p (s <= p < e).
std::pair<int32_t, int32_t> CallAt(std::span<const int32_t> ends, int32_t p) {
  auto it = std::upper_bound(ends.begin(), ends.end(), p);
  return {it == ends.begin() ? 0 : *(it - 1), *it};
}

}  // namespace

std::optional<std::vector<int32_t>> ResumeChunks(std::span<const int32_t> ends, int32_t p,
                                                 uint32_t n_batch, uint32_t n_ubatch,
                                                 int32_t tiled_from) {
  auto it = std::upper_bound(ends.begin(), ends.end(), p);
  const bool planned_end = p <= 0 || (it != ends.begin() && *(it - 1) == p);
  if (planned_end || it == ends.end()) return std::vector<int32_t>(ends.begin(), ends.end());
  auto tiled = [&](auto end) {
    const int32_t start = end == ends.begin() ? 0 : *(end - 1);
    return ClassOf(*end - start, tiled_from) == CallClass::kTiled;
  };
  if (!tiled(it)) return std::nullopt;  // p inside a short call
  // The tiled calls from p's on, up to the next short call or the prompt's end.
  auto last = it;
  while (last + 1 != ends.end() && tiled(last + 1)) ++last;
  if (*last - p < tiled_from) return std::nullopt;
  std::vector<int32_t> out(ends.begin(), it);
  for (int32_t pos = p; pos < *last;) out.push_back(pos = NextChunkEnd(pos, *last, n_batch, n_ubatch));
  out.insert(out.end(), last + 1, ends.end());
  return out;
}

int32_t ExactRestoreFloor(std::span<const int32_t> ends, int32_t p, int32_t tiled_from) {
  if (p <= 0 || p >= ends.back()) return p;
  const auto [s, e] = CallAt(ends, p);
  const int32_t q = p == s ? p : std::min(p, e - MinRows(ClassOf(e - s, tiled_from), tiled_from));
  return q < tiled_from ? 0 : q;
}

bool ExactRestorePoint(std::span<const int32_t> ends, int32_t p, int32_t tiled_from) {
  if (p <= 0 || p >= ends.back()) return true;
  const auto [s, e] = CallAt(ends, p);
  const CallClass c = ClassOf(e - s, tiled_from);
  return p == s || (ClassOf(p - s, tiled_from) == c && ClassOf(e - p, tiled_from) == c);
}

bool SplitChunkAt(std::vector<int32_t>& ends, int32_t q, int32_t tiled_from) {
  if (q <= 0 || q > ends.back() || !ExactRestorePoint(ends, q, tiled_from)) return false;
  auto it = std::lower_bound(ends.begin(), ends.end(), q);
  if (*it != q) ends.insert(it, q);
  return true;
}

Status Prefill(Context& ctx, int32_t seq, std::span<const Token> tokens, int32_t pos0,
               std::span<const int32_t> chunk_ends,
               const std::function<Status(int32_t)>& on_chunk_end) {
  const int32_t end = pos0 + int32_t(tokens.size());
  size_t next_end = 0;
  int32_t pos = pos0;
  while (pos < end) {
    while (next_end < chunk_ends.size() && chunk_ends[next_end] <= pos) ++next_end;
    int32_t stop = std::min<int32_t>(end, pos + int32_t(ctx.n_batch()));
    if (next_end < chunk_ends.size()) stop = std::min(stop, chunk_ends[next_end]);
    std::span<const Token> chunk = tokens.subspan(pos - pos0, stop - pos);
    PREFIXD_RETURN_IF_ERROR(ctx.DecodeChunk(seq, chunk, pos, stop == end));
    pos = stop;
    if (on_chunk_end) PREFIXD_RETURN_IF_ERROR(on_chunk_end(pos));
  }
  return Status::OK();
}

}  // namespace prefixd::engine
