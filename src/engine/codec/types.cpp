#include "engine/codec/types.h"

namespace prefixd::engine {

const char* MemoryLayoutName(MemoryLayout layout) {
  switch (layout) {
    case MemoryLayout::kAttention: return "attention";
    case MemoryLayout::kIswa: return "iswa";
    case MemoryLayout::kHybrid: return "hybrid";
    case MemoryLayout::kHybridIswa: return "hybrid-iswa";
    case MemoryLayout::kRecurrent: return "recurrent";
    case MemoryLayout::kDsa: return "dsa";
    case MemoryLayout::kMsa: return "msa";
    case MemoryLayout::kDsaIswa: return "dsa-iswa";
    case MemoryLayout::kHybridIdx: return "hybrid-idx";
    case MemoryLayout::kDsv4: return "dsv4";
  }
  return "unknown";
}

const char* StateModeName(StateMode mode) {
  switch (mode) {
    case StateMode::kSliced: return "sliced";
    case StateMode::kWhole: return "whole";
  }
  return "unknown";
}

}  // namespace prefixd::engine
