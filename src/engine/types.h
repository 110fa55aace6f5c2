// Engine types shared with the layers above. Nothing here includes llama.h.
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
};

const char* MemoryLayoutName(MemoryLayout layout);

// True when the layout has attention rows that can be cut by position.
inline bool LayoutHasRows(MemoryLayout l) { return l != MemoryLayout::kRecurrent; }
// True when restoring a prefix needs a snapshot taken at exactly that position.
inline bool LayoutNeedsSnapshot(MemoryLayout l) { return l != MemoryLayout::kAttention; }

// How the cache stores a model's state; decided once at start by probing the state codec.
enum class StateMode {
  kSliced,  // attention rows cut into Blocks; a Snapshot holds the partial (recurrent / SWA) state
  kWhole,   // the codec cannot slice this layout: a Snapshot is the whole sequence state at its
            // position (correct, just larger); no Blocks carry rows
};

// "sliced" or "whole": the names logs, stats and the layout fingerprint use.
const char* StateModeName(StateMode mode);

}  // namespace prefixd::engine
