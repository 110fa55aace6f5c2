// Test-only: deterministic tensor contents for the ggml kernel tests (flash_attn_tile_test,
// work_buffer_test), spread over [-1, 1] so every lane of a vector kernel carries its own value.
#pragma once

#include <cstdint>

namespace prefixd::engine::testing {

// The value at index `i` of the tensor numbered `salt`: a hash, not a formula a kernel could
// get right by symmetry.
inline float FillValue(uint32_t i, uint32_t salt) {
  uint32_t x = i * 2654435761u + salt * 40503u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return float(int32_t(x % 2001) - 1000) / 1000.0f;
}

}  // namespace prefixd::engine::testing
