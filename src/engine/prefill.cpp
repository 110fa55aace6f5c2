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
