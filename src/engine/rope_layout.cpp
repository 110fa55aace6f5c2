#include "engine/rope_layout.h"

#include <algorithm>
#include <cassert>

namespace prefixd::engine {

RopeLayout::RopeLayout(std::vector<RopeSpan> spans) {
  for (const RopeSpan& s : spans) {
    assert(s.n_pos > 0 && s.n_pos <= s.n_rows);
    if (s.n_pos < s.n_rows) spans_.push_back(s);
  }
}

int32_t RopeLayout::TimeAt(int32_t index) const {
  int32_t saved = 0;
  for (const RopeSpan& s : spans_) {
    if (index < s.offset) break;
    if (index < s.offset + s.n_rows) return s.offset - saved;  // a row: the image's t0
    saved += s.n_rows - s.n_pos;
  }
  return index - saved;
}

}  // namespace prefixd::engine
