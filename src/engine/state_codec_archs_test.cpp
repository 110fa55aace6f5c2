// State codec against the pinned llama.cpp for the memory types of llama.cpp's own generated
// models (tests/test-llama-archs.cpp, run into a temporary folder): MLA caches (K only), the
// DSA / MSA index caches, DSA with SWA, hybrid with an index cache, and an iswa whose base
// cache has no layers. For each: parse -> emit is byte-identical (whole, partial, ranged);
// rows cut from a later state (whole or ranged) + the partial at P assemble the state a cold
// run holds at P byte for byte, whose next logits are bit-identical to the cold run's; and a
// partial from another position is refused. The memory type comes from the model
// (Model::state_format), never from the bytes.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/codec/state_codec.h"
#include "engine/state_codec_test_util.h"

namespace prefixd::engine {
namespace {

using testing::BitIdentical;
using testing::LogitsDiff;
using testing::MaxAbsDiff;
using testing::Captured;
using testing::CodecContextOptions;
using testing::DecodeTail;
using testing::GeneratedModels;
using testing::GeneratedTokens;
using testing::PrefillAndCapture;

constexpr int32_t kQ = 96;
constexpr int32_t kTail = 6;

struct ArchCase {
  const char* arch;
  MemoryLayout layout;
  bool kv_has_v;
};

const ArchCase kCases[] = {
    {"deepseek2", MemoryLayout::kAttention, false},   // MLA
    {"mistral4", MemoryLayout::kAttention, false},    // MLA
    {"exaone4", MemoryLayout::kAttention, true},      // n_swa > 0 but no SWA memory
    {"qwen4exp", MemoryLayout::kHybridIdx, true},     // hybrid + indexer cache, PLE cell ext
    {"glm-dsa", MemoryLayout::kDsa, false},
    {"deepseek32", MemoryLayout::kDsa, false},
    {"hy_v4", MemoryLayout::kDsa, false},
    {"minimax-m3", MemoryLayout::kMsa, true},
    {"dots3note", MemoryLayout::kDsaIswa, false},
    {"kimi-linear", MemoryLayout::kHybrid, false},    // hybrid with MLA attention
    {"kimi-k3", MemoryLayout::kHybrid, false},
    {"bailingmoe3", MemoryLayout::kHybrid, false},
    {"lfm2", MemoryLayout::kHybridIswa, true},        // every attention layer is SWA
};

class StateCodecArchsTest : public ::testing::TestWithParam<ArchCase> {
 protected:
  void SetUp() override {
    model_ = GeneratedModels::Get().Load(GetParam().arch);
    ASSERT_NE(model_, nullptr);
    format_ = model_->state_format();
    tokens_ = GeneratedTokens(*model_, kQ + kTail);
  }

  std::unique_ptr<Context> NewContext(bool flash_attn) {
    auto ctx = Context::Create(*model_, CodecContextOptions(flash_attn));
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    return ctx.ok() ? std::move(ctx).value() : nullptr;
  }

  void ExpectEmitIdentical(std::span<const uint8_t> bytes, bool partial) {
    auto parsed = partial ? ParsePartialState(bytes, format_) : ParseState(bytes, format_);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto emitted = EmitState(*parsed);
    ASSERT_TRUE(emitted.ok()) << emitted.status().ToString();
    EXPECT_TRUE(std::equal(emitted->begin(), emitted->end(), bytes.begin(), bytes.end()))
        << (partial ? "partial" : "whole") << " state of " << bytes.size() << " bytes";
  }

  // Rows [p0, p1) of `state`, in `pieces` (p0, p1, used), assembled with the partial at p.
  Result<std::vector<uint8_t>> Assemble(std::span<const uint8_t> state,
                                        const std::vector<std::array<int32_t, 3>>& pieces,
                                        std::span<const uint8_t> partial, int32_t p) {
    PREFIXD_ASSIGN_OR_RETURN(ParsedState parsed, ParseState(state, format_));
    PREFIXD_ASSIGN_OR_RETURN(StateShape shape, StateShapeOf(parsed));
    std::vector<std::vector<uint8_t>> payloads;
    std::vector<RowsRef> refs;
    for (const auto& [p0, p1, used] : pieces) {
      PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> r, EncodeRows(parsed, p0, p1));
      payloads.push_back(std::move(r));
    }
    for (size_t i = 0; i < pieces.size(); ++i) refs.push_back({payloads[i], uint32_t(pieces[i][2])});
    return AssembleState(refs, partial, shape, p);
  }

  // Restores [0, p) assembled from rows of `c.whole` into seq 1 and compares with a cold run.
  void ExpectRestoreMatchesCold(Context& ctx, const Captured& c, int32_t p,
                                const std::vector<std::array<int32_t, 3>>& pieces) {
    SCOPED_TRACE("P=" + std::to_string(p) + ", " + std::to_string(pieces.size()) + " payloads");
    std::span<const uint8_t> partial;
    if (LayoutNeedsSnapshot(format_.layout)) partial = c.partial_at.at(p);
    auto assembled = Assemble(c.whole, pieces, partial, p);
    ASSERT_TRUE(assembled.ok()) << assembled.status().ToString();
    EXPECT_TRUE(*assembled == c.whole_at.at(p))
        << "assembled " << assembled->size() << " bytes, native " << c.whole_at.at(p).size();
    ctx.SeqClear(0);
    ASSERT_TRUE(Prefill(ctx, 0, std::span<const Token>(tokens_.data(), size_t(p)), 0, std::vector<int32_t>{}).ok());
    auto cold = DecodeTail(ctx, 0, tokens_, p, kTail);
    ASSERT_TRUE(cold.ok()) << cold.status().ToString();
    const std::vector<uint8_t>& layout = c.layout_at.at(p);
    EXPECT_EQ(layout.empty(), !LayoutHasSlidingWindow(format_.layout));
    // With the cell layout (llama.cpp patch 0005): bit-identical, sliding windows included.
    ASSERT_TRUE(ctx.SetState(1, *assembled, StatePart::kWhole, layout).ok());
    EXPECT_EQ(ctx.SeqPosMax(1), p - 1);
    auto warm = DecodeTail(ctx, 1, tokens_, p, kTail);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
    EXPECT_TRUE(BitIdentical(*warm, *cold)) << "warm and cold logits differ: " << LogitsDiff(*warm, *cold);
    ctx.SeqClear(1);
    if (layout.empty()) return;
    // Without it (the unpatched read): a sliding window's cells lie from cell 0, where the cold
    // run holds them at their positions, so the masked attention adds the same terms in another
    // order; whether that moves a last bit depends on the values (CI, stop 23: lfm2 differed in
    // 1 process in ~80, 88 of 128 logits off by < 1e-6). A wrong state is off by far more.
    ASSERT_TRUE(ctx.SetState(1, *assembled, StatePart::kWhole).ok());
    auto plain = DecodeTail(ctx, 1, tokens_, p, kTail);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_LE(MaxAbsDiff(*plain, *cold), 1e-3) << LogitsDiff(*plain, *cold);
    std::printf("[ layout   ] %-12s P=%d without the cell layout: %s\n", GetParam().arch, p,
                LogitsDiff(*plain, *cold).c_str());
    ctx.SeqClear(1);
  }

  const Model* model_ = nullptr;
  StateFormat format_;
  std::vector<Token> tokens_;
};

TEST_P(StateCodecArchsTest, FormatComesFromTheModel) {
  EXPECT_EQ(format_.layout, GetParam().layout) << MemoryLayoutName(format_.layout);
  EXPECT_EQ(format_.kv_has_v, GetParam().kv_has_v);
}

TEST_P(StateCodecArchsTest, ParseEmitIsByteIdentical) {
  auto ctx = NewContext(false);
  ASSERT_NE(ctx, nullptr);
  auto empty = ctx->GetState(1, StatePart::kWhole);
  ASSERT_TRUE(empty.ok());
  ExpectEmitIdentical(*empty, false);
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {1, 37, 64});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectEmitIdentical(c->whole, false);
  for (const auto& [p, bytes] : c->whole_at) ExpectEmitIdentical(bytes, false);
  if (LayoutNeedsSnapshot(format_.layout)) {
    for (const auto& [p, bytes] : c->partial_at) ExpectEmitIdentical(bytes, true);
  }
  auto ranged = ctx->GetStateRange(0, 40, kQ);
  ASSERT_TRUE(ranged.ok());
  ExpectEmitIdentical(*ranged, false);
  // The partial section of the whole state is the body of GetState(kPartial); the recurrent
  // section does not grow with the position (the index section after it does).
  auto at_1 = ParseState(c->whole_at.at(1), format_);
  auto at_q = ParseState(c->whole, format_);
  ASSERT_TRUE(at_1.ok() && at_q.ok());
  if (LayoutNeedsSnapshot(format_.layout)) {
    auto at_64 = ParseState(c->whole_at.at(64), format_);
    ASSERT_TRUE(at_64.ok());
    EXPECT_EQ(at_64->partial.size + 8, c->partial_at.at(64).size());
    EXPECT_EQ(at_1->recurrent.bytes.size, at_q->recurrent.bytes.size);
  }
  std::printf("[ sizes    ] %-12s %-11s Q=%d whole %zu B, partial %zu B, rows %s\n",
              GetParam().arch, MemoryLayoutName(format_.layout), kQ, c->whole.size(),
              size_t(at_q->partial.size), format_.kv_has_v ? "K+V" : "K only (MLA)");
}

TEST_P(StateCodecArchsTest, RestoreMatchesColdRun) {
  for (bool fa : {false, true}) {
    SCOPED_TRACE(fa ? "flash attention" : "no flash attention");
    auto ctx = NewContext(fa);
    ASSERT_NE(ctx, nullptr);
    auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {64});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ExpectRestoreMatchesCold(*ctx, *c, 64, {{0, 64, 64}});
  }
}

// A cell layout that is not the state's is refused and leaves the sequence empty: one taken at
// another position (other cells), one cut short, one with a byte changed in its runs. A model
// without a sliding-window cache records none, and refuses any layout it is given (no cache of
// it takes the entry).
TEST_P(StateCodecArchsTest, ForeignCellLayoutIsRefused) {
  auto ctx = NewContext(false);
  ASSERT_NE(ctx, nullptr);
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {37, 64});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<uint8_t>& state = c->whole_at.at(37);
  if (!LayoutHasSlidingWindow(format_.layout)) {
    EXPECT_TRUE(c->layout_at.at(37).empty());
    const std::vector<uint8_t> stray(24, 0);
    EXPECT_TRUE(ctx->SetState(1, state, StatePart::kWhole, stray).IsCorruption());
    EXPECT_EQ(ctx->SeqPosMax(1), -1) << "a refused restore leaves the sequence empty";
    return;
  }
  std::vector<uint8_t> other = c->layout_at.at(64);
  std::vector<uint8_t> short_one = c->layout_at.at(37);
  short_one.resize(short_one.size() - 4);
  std::vector<uint8_t> changed = c->layout_at.at(37);
  changed[changed.size() - 8] ^= 0x01;  // the last run's position
  for (const auto* layout : {&other, &short_one, &changed}) {
    Status st = ctx->SetState(1, state, StatePart::kWhole, *layout);
    EXPECT_TRUE(st.IsCorruption()) << st.ToString();
    EXPECT_EQ(ctx->SeqPosMax(1), -1) << "a refused restore leaves the sequence empty";
  }
  ASSERT_TRUE(ctx->SetState(1, state, StatePart::kWhole, c->layout_at.at(37)).ok());
  EXPECT_EQ(ctx->SeqPosMax(1), 36);
}

TEST_P(StateCodecArchsTest, RestoreAtOddPositionFromSeveralPayloads) {
  auto ctx = NewContext(false);
  ASSERT_NE(ctx, nullptr);
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {37});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectRestoreMatchesCold(*ctx, *c, 37, {{0, 16, 16}, {16, 32, 16}, {32, 48, 5}});
  ExpectRestoreMatchesCold(*ctx, *c, 37, {{0, 20, 10}, {10, 37, 27}});
}

// Rows cut from a ranged read (llama.cpp patch 0001: every kv cache, the index ones too, writes
// only [p0, p1)) equal the rows cut from the whole state.
TEST_P(StateCodecArchsTest, RangedReadEqualsSliceOfWholeState) {
  auto ctx = NewContext(true);
  ASSERT_NE(ctx, nullptr);
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto whole = ParseState(c->whole, format_);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  for (auto [p0, p1] : {std::pair{0, kQ}, std::pair{32, kQ}, std::pair{45, 70}}) {
    auto bytes = ctx->GetStateRange(0, p0, kQ);
    ASSERT_TRUE(bytes.ok());
    auto ranged = ParseState(*bytes, format_);
    ASSERT_TRUE(ranged.ok()) << ranged.status().ToString();
    auto from_range = EncodeRows(*ranged, p0, p1);
    auto from_whole = EncodeRows(*whole, p0, p1);
    ASSERT_TRUE(from_range.ok() && from_whole.ok()) << from_range.status().ToString();
    EXPECT_EQ(*from_range, *from_whole) << "[" << p0 << ", " << p1 << ")";
  }
}

TEST_P(StateCodecArchsTest, RefusesWhatDoesNotFit) {
  auto ctx = NewContext(false);
  ASSERT_NE(ctx, nullptr);
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {30, 37});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  if (LayoutNeedsSnapshot(format_.layout)) {
    EXPECT_FALSE(Assemble(c->whole, {{0, 37, 37}}, {}, 37).ok()) << "no partial";
    auto wrong = Assemble(c->whole, {{0, 37, 37}}, c->partial_at.at(30), 37);
    EXPECT_FALSE(wrong.ok()) << "a partial taken at another position";
  } else {
    EXPECT_FALSE(Assemble(c->whole, {{0, 37, 37}}, c->partial_at.at(37), 37).ok());
  }
  EXPECT_FALSE(Assemble(c->whole, {{0, 16, 16}, {20, 37, 17}}, {}, 37).ok()) << "a gap";
  // Without the model's format an MLA or index state is not read as something else.
  if (!format_.kv_has_v || format_.layout == MemoryLayout::kHybridIdx) {
    StateFormat wrong = format_;
    wrong.kv_has_v = !format_.kv_has_v;
    wrong.index_key_length = format_.index_key_length + 64;
    EXPECT_FALSE(ParseState(c->whole, wrong).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, StateCodecArchsTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ArchCase>& info) {
                           return testing::ArchTestName(info.param.arch);
                         });

// deepseek4's own cache (raw kv + compressed states) is not sliced: the codec says so, and the
// caller keeps whole-state snapshots.
TEST(StateCodecArchs, Dsv4IsNotSliced) {
  const Model* model = GeneratedModels::Get().Load("deepseek4");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->layout(), MemoryLayout::kDsv4);
  auto ctx = Context::Create(*model, CodecContextOptions(false));
  ASSERT_TRUE(ctx.ok());
  auto c = PrefillAndCapture(**ctx, 0, GeneratedTokens(*model, 20), 20, {});
  ASSERT_TRUE(c.ok());
  auto parsed = ParseState(c->whole, model->state_format());
  EXPECT_FALSE(parsed.ok());
}

// deepseek4's whole state, the Snapshot the cache keeps for it, restored into an empty sequence
// and followed by the cold run's next call. Its raw cache is an iswa cache (n_swa 32 in the
// generated model). Without the cell layout, while the window is whole (P <= 32) the restore is
// bit-identical to the cold run; beyond, state_write skips the cells the window masks and
// state_read lays the rest out from cell 0, while the cold run holds them at other cells, so
// attention sums them in another order. The bytes read back from the restored sequence equal the
// Snapshot's: what differs is the cells' layout, not the state. With the layout (llama.cpp
// patch 0005, cell_layout.h) every restore is bit-identical.
TEST(StateCodecArchs, Dsv4WholeStateRestore) {
  const Model* model = GeneratedModels::Get().Load("deepseek4");
  ASSERT_NE(model, nullptr);
  const std::vector<Token> tokens = GeneratedTokens(*model, 264);
  for (bool fa : {false, true}) {
    ContextOptions o = CodecContextOptions(fa);
    o.n_ctx_per_seq = 1024;
    o.n_ubatch = 64;
    auto ctx = Context::Create(*model, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    for (int32_t p : {32, 33, 200}) {
      SCOPED_TRACE(std::string(fa ? "flash attention" : "no flash attention") + ", P " +
                   std::to_string(p));
      auto c = PrefillAndCapture(**ctx, 0, tokens, p + 64, {p});
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      const std::vector<float> cold = testing::LastLogits(**ctx);
      // Without the cell layout (the unpatched read).
      ASSERT_TRUE((*ctx)->SetState(0, c->whole_at.at(p), StatePart::kWhole).ok());
      auto back = (*ctx)->GetState(0, StatePart::kWhole);
      ASSERT_TRUE(back.ok());
      auto plain = DecodeTail(**ctx, 0, tokens, p, 64);
      ASSERT_TRUE(plain.ok()) << plain.status().ToString();
      std::printf("[ dsv4     ] %s P=%d without the cell layout: %s\n", fa ? "fa  " : "nofa", p,
                  LogitsDiff(*plain, cold).c_str());
      EXPECT_TRUE(*back == c->whole_at.at(p)) << "the restored state reads back other bytes";
      if (p <= 32) EXPECT_TRUE(BitIdentical(*plain, cold)) << LogitsDiff(*plain, cold);
      EXPECT_LT(MaxAbsDiff(*plain, cold), 1e-3) << "measured at most 1.3e-5 (6 seeds)";
      // With it (llama.cpp patch 0005): the cells where the cold run holds them, bit-identical.
      ASSERT_FALSE(c->layout_at.at(p).empty());
      ASSERT_TRUE(
          (*ctx)->SetState(0, c->whole_at.at(p), StatePart::kWhole, c->layout_at.at(p)).ok());
      auto warm = DecodeTail(**ctx, 0, tokens, p, 64);
      ASSERT_TRUE(warm.ok()) << warm.status().ToString();
      EXPECT_TRUE(BitIdentical(*warm, cold)) << LogitsDiff(*warm, cold);
    }
  }
}

}  // namespace
}  // namespace prefixd::engine
