// ChunkingMemo: what the chunking-invariance probe (CodecProbe::chunking_invariant) found,
// remembered in the cache dir per model and settings, so that a restart decodes no probe prompt
// for it (the probe's 128 tokens were most of a restart's time to first token).
//
// The answer only chooses a log note and a stat; nothing the cache restores depends on it. The
// key covers what the answer depends on: the model file's content digest, the context settings
// that shape the graph (batch, micro-batch, threads, flash attention, KV types, GPU layers) and
// llama.cpp's build (its system info line and the patch set its kernels were built with). A line that fails its checksum is ignored.
//
// File format (<cache_dir>/chunking.tsv), one line per key:
//   <64 hex key> TAB <0|1> TAB <8 hex masked CRC32C of "<key> TAB <0|1>">
// Written whole (temp file, rename); a lost or torn file only makes the next start probe again.
#pragma once

#include <optional>
#include <string>

#include "engine/context.h"
#include "engine/model/model.h"
#include "util/hash.h"

namespace prefixd::engine {

// The memo key of `model` (content digest `model_digest`) with context settings `ctx`, its
// layers offloaded so (`n_gpu_layers`) to `devices` (Model::devices(): the kernels that run).
Digest ChunkingKey(const Digest& model_digest, const ContextOptions& ctx, int n_gpu_layers,
                   const std::string& devices);

// The remembered answer for `key` in the memo at `path`; nullopt when none (or unreadable).
std::optional<bool> LoadChunkingInvariant(const std::string& path, const Digest& key);

// Remembers `invariant` for `key` (keeps the other keys' lines). Best effort: a failure only
// makes the next start probe again.
Status SaveChunkingInvariant(const std::string& path, const Digest& key, bool invariant);

}  // namespace prefixd::engine
