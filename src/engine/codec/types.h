// The engine's base vocabulary: tokens and the memory layouts and state formats the state codec
// reads (every module of the engine speaks it). Nothing here includes llama.h.
#pragma once

#include <cstdint>
#include <string>

namespace prefixd::engine {

using Token = int32_t;

// How a model's memory is built, which decides what the cache can slice:
// attention rows are sliceable by position; recurrent state and SWA windows are not.
enum class MemoryLayout {
  kAttention,   // plain KV cache: rows only
  kIswa,        // base KV + sliding-window KV (gemma3, gpt-oss): rows + SWA partial
  kHybrid,      // attention KV + recurrent state (qwen35, nemotron_h, lfm2…): rows + partial
  kHybridIswa,  // attention KV with SWA layers + recurrent state
  kRecurrent,   // recurrent only (mamba2): partial only, no rows
  // The pinned llama.cpp's other memory types (src/llama-model.cpp create_memory):
  kDsa,         // llama_kv_cache_dsa (deepseek32, glm-dsa, hy_v4): kv(mla) kv(lid), rows only
  kMsa,         // llama_kv_cache_msa (minimax-m3): kv(base) kv(idx), rows only
  kDsaIswa,     // llama_kv_cache_dsa_iswa (dots3note): kv(mla) kv(lid) + SWA partial
  kHybridIdx,   // llama_memory_hybrid_idx (qwen4exp): kv recurrent kv(idx) + recurrent partial
  kDsv4,        // llama_kv_cache_dsv4 (deepseek4): not sliced; whole-state snapshots only
};

// What the bytes of a state do not say about a model's memory and the codec needs to read
// them, decided from the model at load (arch name and GGUF hyperparameters, never from bytes).
struct StateFormat {
  MemoryLayout layout = MemoryLayout::kAttention;
  bool cell_ext = false;        // kv cells carry the 12-byte ext (M-RoPE or PLE)
  bool kv_has_v = true;         // false for MLA caches: K only, no V tensors
  bool index_has_v = true;      // the index cache (kDsa, kMsa, kDsaIswa, kHybridIdx)
  bool index_cell_ext = false;  // the index cache's cells carry the ext
  uint32_t index_key_length = 0;  // kHybridIdx: elements per index K row (delimits the section)
};

const char* MemoryLayoutName(MemoryLayout layout);

// True when the layout has attention rows that can be cut by position.
inline bool LayoutHasRows(MemoryLayout l) {
  return l != MemoryLayout::kRecurrent && l != MemoryLayout::kDsv4;
}
// True when restoring a prefix needs a snapshot taken at exactly that position.
inline bool LayoutNeedsSnapshot(MemoryLayout l) {
  return l != MemoryLayout::kAttention && l != MemoryLayout::kDsa && l != MemoryLayout::kMsa;
}
// True when the layout has a sliding-window cache (deepseek4's raw cache is one): a restore
// sets a window that may have dropped cells, laid out from the ring's start, so attention
// adds the same terms in another order than the cold run did (docs/architecture.md, "What
// stays inexact").
inline bool LayoutHasSlidingWindow(MemoryLayout l) {
  return l == MemoryLayout::kIswa || l == MemoryLayout::kHybridIswa ||
         l == MemoryLayout::kDsaIswa || l == MemoryLayout::kDsv4;
}
// True when the codec can take the layout's states apart (kDsv4: not; see docs/state-codec.md).
inline bool LayoutIsSliceable(MemoryLayout l) { return l != MemoryLayout::kDsv4; }
// True when the state has a second row section (an index cache) after the attention rows.
inline bool LayoutHasIndex(MemoryLayout l) {
  return l == MemoryLayout::kDsa || l == MemoryLayout::kMsa || l == MemoryLayout::kDsaIswa ||
         l == MemoryLayout::kHybridIdx;
}

// How the cache stores a model's state; decided once at start by probing the state codec.
enum class StateMode {
  kSliced,  // attention rows cut into Blocks; a Snapshot holds the partial (recurrent / SWA) state
  kWhole,   // the codec cannot slice this layout: a Snapshot is the whole sequence state at its
            // position (correct, just larger); no Blocks carry rows
};

// "sliced" or "whole": the names logs, stats and the layout fingerprint use.
const char* StateModeName(StateMode mode);

}  // namespace prefixd::engine
