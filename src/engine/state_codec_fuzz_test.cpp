// Randomized robustness test of the state codec: real states, partials and rows payloads of one
// model per memory layout, truncated and mutated thousands of times, must give a Status and
// never crash, read out of bounds or allocate without bound (run it under -fsanitize=address
// too). Whatever still parses must emit back to the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/codec/state_codec.h"
#include "engine/state_codec_test_util.h"

namespace prefixd::engine {
namespace {

using testing::CodecContextOptions;
using testing::CodecModels;
using testing::PrefillAndCapture;
using testing::PromptTokens;

constexpr int32_t kQ = 24;
constexpr int32_t kP = 16;
constexpr int kIterations = 3000;

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  std::vector<uint8_t> Mutate(const std::vector<uint8_t>& in) {
    std::vector<uint8_t> b = in;
    switch (Pick(6)) {
      case 0:  // truncate
        b.resize(Pick(b.size() + 1));
        break;
      case 1:  // flip a few bytes
        for (size_t n = 1 + Pick(4); n > 0 && !b.empty(); --n) b[Offset(b)] ^= uint8_t(1 + Pick(255));
        break;
      case 2:  // an interesting u32 over a (mostly metadata) word
      case 3: {
        static const uint32_t kValues[] = {0, 1, 2, 3, 0xffffffffu, 0x7fffffffu, 0x80000000u,
                                           0x10000u, 0x40000000u, 12, 24, 37};
        const uint32_t v = Pick(3) == 0 ? uint32_t(rng_()) : kValues[Pick(std::size(kValues))];
        if (b.size() >= 4) {
          const size_t off = std::min(Offset(b) & ~size_t(3), b.size() - 4);
          std::memcpy(b.data() + off, &v, 4);
        }
        break;
      }
      case 4:  // insert bytes
        b.insert(b.begin() + long(Pick(b.size() + 1)), size_t(1 + Pick(8)), uint8_t(rng_()));
        break;
      default:  // delete bytes
        if (!b.empty()) {
          const size_t off = Pick(b.size());
          b.erase(b.begin() + long(off), b.begin() + long(std::min(b.size(), off + 1 + Pick(8))));
        }
        break;
    }
    return b;
  }

  size_t Pick(size_t n) { return n == 0 ? 0 : size_t(rng_() % n); }

 private:
  // Metadata sits near the start and between layers: favour the first bytes.
  size_t Offset(const std::vector<uint8_t>& b) {
    return Pick(2) == 0 ? Pick(std::min<size_t>(b.size(), 256)) : Pick(b.size());
  }
  std::mt19937 rng_;
};

// Mutates a real state, partial and rows payload of `model` (read with its StateFormat).
void FuzzModel(const Model* model, const std::vector<Token>& tokens, const std::string& name) {
  ASSERT_NE(model, nullptr);
  auto ctx = Context::Create(*model, CodecContextOptions(false));
  ASSERT_TRUE(ctx.ok());
  auto c = PrefillAndCapture(**ctx, 0, tokens, kQ, {kP});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const StateFormat& format = model->state_format();
  const MemoryLayout layout = model->layout();
  auto parsed = ParseState(c->whole, format);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto shape = StateShapeOf(*parsed);
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  std::vector<uint8_t> rows;
  if (parsed->has_rows) {
    auto r = EncodeRows(*parsed, 0, kP);
    ASSERT_TRUE(r.ok());
    rows = std::move(r).value();
  }
  const std::vector<uint8_t> partial =
      LayoutNeedsSnapshot(layout) ? c->partial_at.at(kP) : std::vector<uint8_t>{};
  // The unmutated inputs assemble.
  const RowsRef good_ref[] = {{rows, uint32_t(kP)}};
  const std::span<const RowsRef> good_refs(good_ref, rows.empty() ? 0 : 1);
  ASSERT_TRUE(AssembleState(good_refs, partial, *shape, kP).ok());

  Mutator m(0x5eed + uint32_t(name.size()));
  int parsed_ok = 0, partial_ok = 0, rows_ok = 0, assembled_ok = 0;
  for (int i = 0; i < kIterations; ++i) {
    // A mutated whole state: parse, and if it parses, emit, learn, cut.
    const std::vector<uint8_t> whole = m.Mutate(c->whole);
    auto p = ParseState(whole, format);
    if (p.ok()) {
      ++parsed_ok;
      auto emitted = EmitState(*p);
      ASSERT_TRUE(emitted.ok());
      EXPECT_TRUE(*emitted == whole) << "iteration " << i;
      (void)StateShapeOf(*p);
      const int32_t p0 = int32_t(m.Pick(kQ + 2)) - 1, p1 = int32_t(m.Pick(kQ + 2));
      auto r = EncodeRows(*p, p0, p1);
      if (r.ok()) (void)ReadRowsInfo(*r);
    }
    // A mutated partial with good rows.
    if (!partial.empty()) {
      const std::vector<uint8_t> bad_partial = m.Mutate(partial);
      if (ParsePartialState(bad_partial, format).ok()) ++partial_ok;
      if (AssembleState(good_refs, bad_partial, *shape, kP).ok()) ++assembled_ok;
    }
    // A mutated rows payload with the good partial, used for a random number of tokens.
    if (!rows.empty()) {
      const std::vector<uint8_t> bad_rows = m.Mutate(rows);
      if (ReadRowsInfo(bad_rows).ok()) ++rows_ok;
      const RowsRef ref[] = {{bad_rows, uint32_t(m.Pick(kP + 2))}};
      if (AssembleState(ref, partial, *shape, -1).ok()) ++assembled_ok;
    }
  }
  std::printf("[ fuzz     ] %-10s %d iterations: whole parsed %d, partial parsed %d, rows read %d, "
              "assembled %d (mutations in tensor data are not detectable by design)\n",
              name.c_str(), kIterations, parsed_ok, partial_ok, rows_ok, assembled_ok);
}

class StateCodecFuzzTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StateCodecFuzzTest, MalformedInputGivesStatusNeverCrashes) {
  const Model* model = CodecModels::Get().Load(GetParam());
  ASSERT_NE(model, nullptr);
  FuzzModel(model, PromptTokens(*model, kQ), GetParam());
}

// One model per memory layout: attention (V transposed), hybrid with cell ext, iswa, recurrent.
INSTANTIATE_TEST_SUITE_P(Layouts, StateCodecFuzzTest,
                         ::testing::Values("llama", "qwen35", "gemma3", "mamba2"));

// The memory types of llama.cpp's generated models: MLA (K only), DSA, MSA, DSA + SWA,
// hybrid with an index cache, hybrid with MLA attention, iswa with an empty base.
class StateCodecFuzzGeneratedTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StateCodecFuzzGeneratedTest, MalformedInputGivesStatusNeverCrashes) {
  const Model* model = testing::GeneratedModels::Get().Load(GetParam());
  ASSERT_NE(model, nullptr);
  FuzzModel(model, testing::GeneratedTokens(*model, kQ), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Layouts, StateCodecFuzzGeneratedTest,
                         ::testing::Values("deepseek2", "glm-dsa", "minimax-m3", "dots3note",
                                           "qwen4exp", "kimi-linear", "lfm2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::ArchTestName(info.param);
                         });

}  // namespace
}  // namespace prefixd::engine
