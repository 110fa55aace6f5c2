// Rope positions apart from cell positions, for a sequence of an M-RoPE model (Qwen2/3-VL,
// Qwen3.5) whose prompt holds images.
//
// Every sequence's cells hold positions 0, 1, 2, ...: one per token and one per image row
// (llama.cpp patch 0021, llama_batch::pos_cell), as for text, so the cache slices, records,
// restores, truncates and captures a sequence with images as it does any other. Rope rotates
// by what the model learned: an image whose rows start at time t0 gives every row the time t0
// and its own height and width positions (libmtmd's decoder positions), and the text after it
// goes on at t0 + n_pos, fewer steps than the image has rows (max(nx, ny) for Qwen's grids).
// So a token's rope time is its cell index less what the images before it saved.
//
// Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

namespace prefixd::engine {

// An image's place in a sequence: its first row's cell, its rows, and the rope steps it takes.
struct RopeSpan {
  int32_t offset = 0;
  int32_t n_rows = 0;
  int32_t n_pos = 0;
  bool operator==(const RopeSpan&) const = default;
};

class RopeLayout {
 public:
  RopeLayout() = default;
  // REQUIRES: spans ascending and disjoint, 0 < n_pos <= n_rows each.
  explicit RopeLayout(std::vector<RopeSpan> spans);

  // No image takes fewer steps than rows: rope positions are the cell positions.
  bool identity() const { return spans_.empty(); }
  // The rope time of the cell `index`: for text, its index less the steps every image ending
  // at or before it saved; for an image's rows, the image's t0 (its first row's time).
  int32_t TimeAt(int32_t index) const;

  bool operator==(const RopeLayout&) const = default;

 private:
  std::vector<RopeSpan> spans_;  // only the images that save steps
};

}  // namespace prefixd::engine
