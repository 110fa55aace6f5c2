#include "util/memcopy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace prefixd {
namespace {

// Every size around the streaming threshold and the cache-line edges, at every alignment of
// source and destination within a line: the bytes equal the source, and nothing around the
// destination range is touched.
TEST(CopyStreaming, EqualsMemcpyAtEverySizeAndAlignment) {
  std::vector<uint8_t> src(20000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + 7);
  for (size_t n : {0ul, 1ul, 63ul, 64ul, 65ul, 4095ul, 4096ul, 4097ul, 4160ul, 12345ul}) {
    for (size_t d_off : {0ul, 1ul, 17ul, 63ul}) {
      for (size_t s_off : {0ul, 5ul, 32ul}) {
        std::vector<uint8_t> dst(n + 200, 0xee);
        CopyStreaming(dst.data() + 64 + d_off, src.data() + s_off, n);
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= 64 + d_off && i < 64 + d_off + n;
          const uint8_t want = inside ? src[s_off + i - 64 - d_off] : 0xee;
          ASSERT_EQ(dst[i], want) << "n " << n << " dst+" << d_off << " src+" << s_off << " at " << i;
        }
      }
    }
  }
}

// The buffer is sized and zeroed as resize() leaves it, at sizes below and above the 1 MiB from
// which its pages are populated at once.
TEST(ResizeForOverwrite, SizesAndZeroesAsResize) {
  for (size_t n : {0ul, 1ul, 4096ul, (4ul << 20) - 1, 4ul << 20, (6ul << 20) + 3}) {
    std::vector<uint8_t> buf;
    ResizeForOverwrite(buf, n);
    ASSERT_EQ(buf.size(), n);
    size_t nonzero = 0;
    for (uint8_t b : buf) nonzero += b != 0;
    EXPECT_EQ(nonzero, 0u) << n;
  }
}

}  // namespace
}  // namespace prefixd
