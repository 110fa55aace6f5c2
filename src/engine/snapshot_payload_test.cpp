#include "engine/codec/snapshot_payload.h"

#include <gtest/gtest.h>

#include <vector>

namespace prefixd::engine {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(seed + i * 7);
  return b;
}

TEST(SnapshotPayload, SplitGivesBackTheStateAndTheLayout) {
  for (size_t layout_size : {size_t(0), size_t(12), size_t(40)}) {
    const std::vector<uint8_t> state = Bytes(100, 3);
    const std::vector<uint8_t> layout = Bytes(layout_size, 90);
    const std::vector<uint8_t> payload = JoinSnapshot(state, layout);
    EXPECT_EQ(payload.size(), state.size() + layout.size() + 8);
    auto parts = SplitSnapshot(payload);
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    EXPECT_EQ(std::vector<uint8_t>(parts->state.begin(), parts->state.end()), state);
    EXPECT_EQ(std::vector<uint8_t>(parts->layout.begin(), parts->layout.end()), layout);
  }
}

// A payload without the trailer (a Snapshot from before it, or bytes cut short) or with a
// layout size past the payload is refused, never split somewhere.
TEST(SnapshotPayload, MalformedTrailerIsCorruption) {
  const std::vector<uint8_t> state = Bytes(64, 1);
  EXPECT_TRUE(SplitSnapshot(state).status().IsCorruption());
  EXPECT_TRUE(SplitSnapshot(std::vector<uint8_t>(5, 0)).status().IsCorruption());
  std::vector<uint8_t> payload = JoinSnapshot(state, Bytes(12, 2));
  std::vector<uint8_t> big = payload;
  big[big.size() - 8] = 0xff;  // layout size low byte: 255 + ... > what is there
  big[big.size() - 7] = 0xff;
  EXPECT_TRUE(SplitSnapshot(big).status().IsCorruption());
  std::vector<uint8_t> cut(payload.begin(), payload.end() - 1);
  EXPECT_TRUE(SplitSnapshot(cut).status().IsCorruption());
  std::vector<uint8_t> magic = payload;
  magic.back() ^= 0x10;
  EXPECT_TRUE(SplitSnapshot(magic).status().IsCorruption());
}

}  // namespace
}  // namespace prefixd::engine
