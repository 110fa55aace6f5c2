// A Snapshot's payload (docs/state-codec.md, "Snapshot payload"): the state llama.cpp wrote at
// the Snapshot's position (the partial section, or the whole state in StateMode::kWhole), then
// the cell layout of the sliding-window caches in it (cell_layout.h; empty for a model without
// one), then the layout's size (u32) and kSnapshotTrailerMagic (u32), host byte order.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "util/status.h"

namespace prefixd::engine {

inline constexpr uint32_t kSnapshotTrailerMagic = 0x5053434c;  // "LCSP"

struct SnapshotParts {
  std::span<const uint8_t> state;
  std::span<const uint8_t> layout;
};

std::vector<uint8_t> JoinSnapshot(std::vector<uint8_t> state, std::span<const uint8_t> layout);

// The parts of `payload` (spans into it). Corruption for a payload without a well-formed
// trailer: a Snapshot from before the trailer has another codec version and never gets here.
Result<SnapshotParts> SplitSnapshot(std::span<const uint8_t> payload);

}  // namespace prefixd::engine
