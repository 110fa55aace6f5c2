#include "engine/codec/snapshot_payload.h"

#include <cstring>
#include <string>

namespace prefixd::engine {

namespace {
constexpr size_t kTrailerBytes = 2 * sizeof(uint32_t);

void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof(v));
}

uint32_t GetU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
}  // namespace

std::vector<uint8_t> JoinSnapshot(std::vector<uint8_t> state, std::span<const uint8_t> layout) {
  state.reserve(state.size() + layout.size() + kTrailerBytes);
  state.insert(state.end(), layout.begin(), layout.end());
  PutU32(&state, uint32_t(layout.size()));
  PutU32(&state, kSnapshotTrailerMagic);
  return state;
}

Result<SnapshotParts> SplitSnapshot(std::span<const uint8_t> payload) {
  if (payload.size() < kTrailerBytes) {
    return Status::Corruption("snapshot payload of " + std::to_string(payload.size()) +
                              " bytes has no trailer");
  }
  const uint8_t* end = payload.data() + payload.size();
  if (GetU32(end - sizeof(uint32_t)) != kSnapshotTrailerMagic) {
    return Status::Corruption("snapshot payload: bad trailer magic");
  }
  const uint64_t layout = GetU32(end - kTrailerBytes);
  if (layout > payload.size() - kTrailerBytes) {
    return Status::Corruption("snapshot payload: layout of " + std::to_string(layout) +
                              " bytes in " + std::to_string(payload.size()));
  }
  const size_t state = payload.size() - kTrailerBytes - size_t(layout);
  return SnapshotParts{payload.first(state), payload.subspan(state, size_t(layout))};
}

}  // namespace prefixd::engine
