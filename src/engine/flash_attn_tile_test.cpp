// llama.cpp patch 0006 (docs/llama-patches.md): the CPU flash-attention kernel computes only the
// rows of a partial Q tile instead of 64 zero-padded ones. The patch is right when a row's result
// does not depend on how many rows share its tile: then the rows of a partial tile are the bits
// the unpatched kernel computed for them among padding. This computes the same query rows once
// as 100 rows (a full tile and a partial one of 36 per head, 2 threads) and once as the first 100
// of 128 (full tiles only) and compares every output bit. Patch 0013: a call of 2..63 query rows
// takes the same tiled path (one partial tile per head), so its rows are the bits the same rows
// get in a call of 128.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "engine/tensor_fill_test_util.h"

namespace prefixd::engine {
namespace {

constexpr int kDk = 64, kHeads = 4, kKvHeads = 2, kKv = 300;

// The attention outputs ([DV, heads, rows], row-major) of `rows` query rows over kKv cells, each
// row seeing the cells up to its own position (kKv - 128 + row).
std::vector<float> Attend(int rows, float softcap) {
  ggml_init_params params = {size_t(64) << 20, nullptr, false};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, kDk, rows, kHeads);
  ggml_tensor* k = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, kDk, kKv, kKvHeads);
  ggml_tensor* v = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, kDk, kKv, kKvHeads);
  ggml_tensor* mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, kKv, rows);
  for (int h = 0; h < kHeads; ++h) {
    for (int r = 0; r < rows; ++r) {
      for (int d = 0; d < kDk; ++d) {
        static_cast<float*>(q->data)[(h * rows + r) * kDk + d] =
            testing::FillValue((h * 128 + r) * kDk + d, 1);
      }
    }
  }
  for (int i = 0; i < kDk * kKv * kKvHeads; ++i) {
    static_cast<ggml_fp16_t*>(k->data)[i] = ggml_fp32_to_fp16(testing::FillValue(i, 2));
    static_cast<ggml_fp16_t*>(v->data)[i] = ggml_fp32_to_fp16(testing::FillValue(i, 3));
  }
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < kKv; ++c) {
      static_cast<ggml_fp16_t*>(mask->data)[r * kKv + c] =
          ggml_fp32_to_fp16(c <= kKv - 128 + r ? 0.0f : -INFINITY);
    }
  }
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, 0.125f, 0.0f, softcap);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  EXPECT_EQ(ggml_graph_compute_with_ctx(ctx, graph, 2), GGML_STATUS_SUCCESS);
  std::vector<float> result(static_cast<const float*>(out->data),
                            static_cast<const float*>(out->data) + ggml_nelements(out));
  ggml_free(ctx);
  return result;
}

TEST(FlashAttnTile, ARowsResultDoesNotDependOnItsTile) {
  for (float softcap : {0.0f, 30.0f}) {
    SCOPED_TRACE(softcap == 0 ? "no soft-cap" : "soft-capped");
    const std::vector<float> partial = Attend(100, softcap);
    const std::vector<float> whole = Attend(128, softcap);
    ASSERT_EQ(partial.size(), size_t(kDk * kHeads * 100));
    // Both are [DV, heads, rows]: the first 100 rows are the first 100 * heads * DV floats.
    EXPECT_EQ(std::memcmp(partial.data(), whole.data(), partial.size() * sizeof(float)), 0)
        << "a row of a partial tile differs from the same row in a full tile";
    bool finite = true;
    for (float x : partial) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite);
  }
}

// Without patch 0013 a call under 64 rows took the per-row path, whose sums run in another order
// (checked against the unpatched library: the rows differed).
TEST(FlashAttnTile, AShortCallsRowsAreTheRowsOfALongCall) {
  const std::vector<float> whole = Attend(128, 0.0f);
  for (int rows : {2, 7, 63}) {
    const std::vector<float> few = Attend(rows, 0.0f);
    ASSERT_EQ(few.size(), size_t(kDk * kHeads * rows));
    EXPECT_EQ(std::memcmp(few.data(), whole.data(), few.size() * sizeof(float)), 0)
        << "a call of " << rows << " rows computes them otherwise than a call of 128";
  }
}

}  // namespace
}  // namespace prefixd::engine
