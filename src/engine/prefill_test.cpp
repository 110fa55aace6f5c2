#include "engine/prefill.h"

#include <gtest/gtest.h>

#include <vector>

namespace prefixd::engine {
namespace {

// The calls a stretch [pos, limit) is decoded in.
std::vector<int32_t> Calls(int32_t pos, int32_t limit, uint32_t n_batch, uint32_t n_ubatch) {
  std::vector<int32_t> sizes;
  while (pos < limit) {
    const int32_t end = NextChunkEnd(pos, limit, n_batch, n_ubatch);
    EXPECT_GT(end, pos);
    EXPECT_LE(end, limit);
    sizes.push_back(end - pos);
    pos = end;
  }
  return sizes;
}

TEST(NextChunkEnd, ShortStretchIsOneCall) {
  EXPECT_EQ(Calls(0, 1, 2048, 512), std::vector<int32_t>({1}));
  EXPECT_EQ(Calls(100, 612, 2048, 512), std::vector<int32_t>({512}));
}

TEST(NextChunkEnd, LongStretchIsCutIntoUbatchesWithoutAShortRest) {
  EXPECT_EQ(Calls(0, 700, 2048, 512), std::vector<int32_t>({512, 188}));
  // 530 tokens: 448 and 82, not 512 and a rest of 18.
  EXPECT_EQ(Calls(0, 530, 2048, 512), std::vector<int32_t>({448, 82}));
  EXPECT_EQ(Calls(7, 7 + 1040, 2048, 512), std::vector<int32_t>({512, 448, 80}));
  // As many calls as llama.cpp's own ubatch split would make, none short unless all is.
  for (int32_t len : {513, 530, 575, 576, 1000, 2048, 2049, 9999}) {
    auto sizes = Calls(0, len, 2048, 512);
    EXPECT_EQ(sizes.size(), size_t((len + 511) / 512)) << len;
    for (int32_t s : sizes) EXPECT_GE(s, kMinCallRows) << len;
  }
  EXPECT_EQ(Calls(0, 40, 2048, 512), std::vector<int32_t>({40}));
}

TEST(NextChunkEnd, NeverExceedsTheBatch) {
  for (int32_t s : Calls(0, 5000, 300, 512)) EXPECT_LE(s, 300);
}

}  // namespace
}  // namespace prefixd::engine
