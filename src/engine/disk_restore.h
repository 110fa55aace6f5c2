// Restoring a prefix the disk tier holds without reading it into RAM first.
//
// The submitting thread opened the records (cache::OpenedPrefix: fronts verified, files asked
// into the page cache). Here, on the worker, each rows payload's front (header, layer table,
// cell exts: what the codec parses) is read into a stand-in of the payload's size, the codec
// places the state's pieces in the stand-ins as if they held the payloads, and llama.cpp's
// state reader reads every row from its file straight into the KV tensors (state_gather.h):
// one copy from the page cache, the checksum taken where the bytes landed. A payload whose
// checksum differs is quarantined and the sequence cleared: the request prefills cold.
#pragma once

#include "cache/store_tier.h"
#include "cache/tiered_cache.h"
#include "engine/context.h"
#include "engine/codec/state_codec.h"

namespace prefixd::engine {

// Sets the first `p` tokens of `opened` into `seq`: the rows of the records that cover them
// (the last one possibly in part) and, when the model needs one, the Snapshot at P (then p must
// be opened.n_tokens). `pieces` is the caller's reusable buffer; `restored_bytes` gets the
// state's size. Any failed check leaves `seq` cleared; a damaged record is reported to `cache`
// (dropped from the disk).
// REQUIRES: the caller owns ctx's thread; 0 < p <= opened.n_tokens.
Status SetOpenedPrefix(Context& ctx, int32_t seq, const cache::OpenedPrefix& opened, size_t p,
                       const StateShape& shape, cache::TieredCache& cache, StatePieces* pieces,
                       size_t* restored_bytes);

}  // namespace prefixd::engine
