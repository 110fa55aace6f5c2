// llama.cpp patches 0009, 0012 and 0014-0018 (docs/llama-patches.md): a recurrent state
// captured inside a decode call is, byte for byte, the state that a call ending there leaves
// (the unpatched way to take it), and capturing changes nothing the call computes. Checked on
// prefixd's tiny test models and llama.cpp's generated ones (every memory type that captures
// inside a call: Gated DeltaNet, Kimi Delta Attention, short convolutions, Mamba scans, their
// windows beside them, with and without rollback states): one 320-token call with captures
// against the same tokens decoded in calls cut at the capture points, with flash attention and
// without; the cut calls have 2 rows or more, which compute each row as in one call (with flash
// attention, llama.cpp patch 0013: AShortCall... below).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/state_codec_test_util.h"

namespace prefixd::engine {
namespace {

using testing::BitIdentical;
using testing::CodecModels;
using testing::LastLogits;
using testing::PromptTokens;

constexpr int32_t kTokens = 320;

// One call for the whole prompt (the codec tests' options cut it into ubatches of 32).
ContextOptions CaptureOptions(bool flash_attn, uint32_t n_capture, uint32_t n_rs_seq = 0) {
  ContextOptions o = testing::CodecContextOptions(flash_attn);
  o.n_ctx_per_seq = o.n_batch = o.n_ubatch = 512;
  o.n_rs_capture = n_capture;
  o.n_rs_seq = n_rs_seq;
  return o;
}

std::unique_ptr<Context> NewContext(const Model& model, bool flash_attn, uint32_t n_capture,
                                    uint32_t n_rs_seq = 0) {
  auto ctx = Context::Create(model, CaptureOptions(flash_attn, n_capture, n_rs_seq));
  EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
  return ctx.ok() ? std::move(ctx).value() : nullptr;
}

struct Case {
  std::string arch;
  bool flash_attn;
  std::vector<int32_t> points;  // ascending, inside (0, kTokens)
  bool generated = false;       // from llama.cpp's generator (GeneratedModels)
  uint32_t n_rs_seq = 0;        // per-token rollback states kept (speculation), as llama.cpp's
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string arch = info.param.arch;
  std::replace(arch.begin(), arch.end(), '-', '_');
  // Points under a tile apart: calls of 2..63 rows.
  const bool short_calls = info.param.points.front() % 64 != 0;
  return arch + (info.param.flash_attn ? "_fa" : "_nofa") +
         (short_calls && info.param.flash_attn ? "_short" : "") +
         (info.param.n_rs_seq > 0 ? "_rollback" : "");
}

class CallCaptureTest : public ::testing::TestWithParam<Case> {};
class CallCaptureRollbackTest : public ::testing::TestWithParam<Case> {};

TEST_P(CallCaptureTest, ACaptureIsTheStateACallEndingThereLeaves) {
  const Case& c = GetParam();
  const Model* model = c.generated ? testing::GeneratedModels::Get().Load(c.arch)
                                   : CodecModels::Get().Load(c.arch);
  ASSERT_NE(model, nullptr);
  auto ctx = NewContext(*model, c.flash_attn, 16, c.n_rs_seq);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(ctx->n_rs_seq(), c.n_rs_seq);
  ASSERT_TRUE(ctx->CapturesInCall());
  const std::vector<Token> tokens = c.generated ? testing::GeneratedTokens(*model, kTokens)
                                                : PromptTokens(*model, kTokens);

  // One call, the states kept at the points.
  ASSERT_EQ(ctx->SetCallCaptures(0, c.points), int32_t(c.points.size()));
  ASSERT_TRUE(ctx->DecodeChunk(0, tokens, 0, true).ok());
  const std::vector<float> logits_one_call = LastLogits(*ctx);
  std::vector<std::vector<uint8_t>> captured;
  for (size_t i = 0; i < c.points.size(); ++i) {
    auto bytes = ctx->CallCapture(int32_t(i));
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    captured.push_back(std::move(bytes).value());
  }
  EXPECT_FALSE(ctx->CallCapture(int32_t(c.points.size())).ok());  // none set there
  auto end_one_call = ctx->GetState(0, StatePart::kPartial);
  ASSERT_TRUE(end_one_call.ok());
  ctx->SetCallCaptures(0, {});

  // The same tokens in calls that end at the points, on the same sequence.
  ctx->SeqClear(0);
  int32_t pos = 0;
  std::vector<int32_t> ends = c.points;
  ends.push_back(kTokens);
  for (size_t i = 0; i < ends.size(); ++i) {
    std::span<const Token> chunk(tokens.data() + pos, size_t(ends[i] - pos));
    ASSERT_TRUE(ctx->DecodeChunk(0, chunk, pos, ends[i] == kTokens).ok());
    pos = ends[i];
    auto cut = ctx->GetState(0, StatePart::kPartial);
    ASSERT_TRUE(cut.ok());
    if (i < captured.size()) {
      EXPECT_EQ(captured[i], *cut) << "capture at " << ends[i] << " differs from a cut there";
      if (i > 0) EXPECT_NE(captured[i], captured[i - 1]);  // a state that moved on
    } else {
      EXPECT_EQ(*end_one_call, *cut) << "the call's own end state differs";
    }
  }
  EXPECT_TRUE(BitIdentical(logits_one_call, LastLogits(*ctx)))
      << "capturing changed what the call computed";
}

// With rollback states (a speculating context), a call split at captures keeps the states of
// its last n_rs_seq + 1 tokens as an uncut call does, whichever piece they fall in: rolling
// back r tokens after it gives the state rolling back r tokens after an uncut call gives.
TEST_P(CallCaptureRollbackTest, ARollbackAfterTheCallIsTheRollbackAfterAnUncutOne) {
  const Case& c = GetParam();
  ASSERT_GT(c.n_rs_seq, 0u);
  const Model* model = c.generated ? testing::GeneratedModels::Get().Load(c.arch)
                                   : CodecModels::Get().Load(c.arch);
  ASSERT_NE(model, nullptr);
  const std::vector<Token> tokens = c.generated ? testing::GeneratedTokens(*model, kTokens)
                                                : PromptTokens(*model, kTokens);
  // A fresh context each time: rows a call left unwritten must not hold an earlier run's states.
  auto rolled_back = [&](std::span<const int32_t> points, int32_t r) -> std::vector<uint8_t> {
    auto ctx = NewContext(*model, c.flash_attn, 16, c.n_rs_seq);
    if (ctx == nullptr) return {};
    ctx->SetCallCaptures(0, points);
    EXPECT_TRUE(ctx->DecodeChunk(0, tokens, 0, true).ok());
    ctx->SetCallCaptures(0, {});
    EXPECT_TRUE(ctx->SeqTruncate(0, kTokens - r)) << "rollback of " << r;
    auto state = ctx->GetState(0, StatePart::kPartial);
    EXPECT_TRUE(state.ok());
    return state.ok() ? *state : std::vector<uint8_t>{};
  };
  for (int32_t r = 1; r <= int32_t(c.n_rs_seq); ++r) {
    const std::vector<uint8_t> split = rolled_back(c.points, r);
    const std::vector<uint8_t> uncut = rolled_back({}, r);
    EXPECT_FALSE(uncut.empty());
    EXPECT_EQ(split, uncut) << "rollback of " << r << " tokens";
  }
}

// with rollback states (a context that speculates): the points end 2 tokens before the call's
// end, so the last n_rs_seq + 1 tokens' states come from two pieces
const Case kRollbackCases[] = {
    Case{"qwen35", true, {64, 192, 256}, false, 3},
    Case{"qwen35", false, {37, 100, 102, 201, 318}, false, 3},
    Case{"lfm2", true, {37, 100, 102, 201, 318}, false, 3},
    Case{"qwen4exp", false, {37, 100, 102, 201, 318}, true, 3},
    Case{"kimi-k3", true, {37, 100, 102, 201, 318}, true, 3},
    Case{"bailingmoe3", false, {37, 100, 102, 201, 318}, true, 3},
};

INSTANTIATE_TEST_SUITE_P(Archs, CallCaptureTest,
                         ::testing::Values(Case{"qwen35", true, {64, 192, 256}},
                                           Case{"qwen35", true, {37, 100, 102, 201, 318}},
                                           Case{"qwen35", false, {37, 100, 102, 201}},
                                           Case{"lfm2", true, {37, 100, 102, 201, 318}},
                                           Case{"lfm2", false, {37, 100, 102, 201, 318}},
                                           Case{"lfm2moe", true, {64, 192, 256}},
                                           Case{"mamba2", true, {37, 100, 102, 201, 318}},
                                           Case{"mamba2", false, {37, 100, 102, 201, 318}},
                                           Case{"nemotron_h", true, {64, 192, 256}},
                                           Case{"nemotron_h", false, {37, 100, 102, 201}},
                                           Case{"nemotron_h_moe", true, {64, 192, 256}},
                                           Case{"granitehybrid", true, {64, 192, 256}},
                                           Case{"falcon-h1", true, {64, 192, 256}},
                                           Case{"mamba", true, {64, 192, 256}},
                                           Case{"jamba", true, {64, 192, 256}},
                                           Case{"jamba", false, {37, 100, 102, 201}},
                                           // hybrid with an indexer cache (kHybridIdx)
                                           Case{"qwen4exp", true, {64, 192, 256}, true},
                                           Case{"qwen4exp", false, {37, 100, 102, 201}, true},
                                           // Kimi Delta Attention (three convolutions a layer)
                                           Case{"kimi-linear", true, {64, 192, 256}, true},
                                           Case{"kimi-linear", false, {37, 100, 102, 201}, true},
                                           Case{"kimi-k3", true, {64, 192, 256}, true},
                                           Case{"bailingmoe3", true, {64, 192, 256}, true},
                                           // a Mamba-2 scan of its own
                                           Case{"plamo2", true, {64, 192, 256}, true},
                                           Case{"plamo2", false, {37, 100, 102, 201}, true},
                                           kRollbackCases[0], kRollbackCases[1],
                                           kRollbackCases[2], kRollbackCases[3],
                                           kRollbackCases[4], kRollbackCases[5]),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Archs, CallCaptureRollbackTest, ::testing::ValuesIn(kRollbackCases),
                         CaseName);

// llama.cpp patch 0013: ggml's CPU flash attention computes a call of 2..63 rows as a partial
// tile, as it computes the partial tiles of longer calls, so each row gets the bits it gets in
// one call of the whole prompt. Without the patch such a call took the per-row path, and the
// logits after it differed in the last bits (docs/llama-patches.md). Pure attention (llama) and
// a hybrid (qwen35): the whole state (every KV row) and the last logits of one 320-row call
// against calls of 37, 63, 2, 99, 117 and 2 rows.
TEST(ShortCallTest, AShortFlashAttentionCallComputesItsRowsAsALongCallDoes) {
  for (const std::string arch : {"llama", "qwen35"}) {
    const Model* model = CodecModels::Get().Load(arch);
    ASSERT_NE(model, nullptr) << arch;
    auto ctx = NewContext(*model, true, 0);
    ASSERT_NE(ctx, nullptr);
    const std::vector<Token> tokens = PromptTokens(*model, kTokens);
    ASSERT_TRUE(ctx->DecodeChunk(0, tokens, 0, true).ok());
    const std::vector<float> logits_one_call = LastLogits(*ctx);
    auto whole_one_call = ctx->GetState(0, StatePart::kWhole);
    ASSERT_TRUE(whole_one_call.ok());
    ctx->SeqClear(0);
    int32_t pos = 0;
    for (int32_t end : {37, 100, 102, 201, 318, kTokens}) {
      std::span<const Token> chunk(tokens.data() + pos, size_t(end - pos));
      ASSERT_TRUE(ctx->DecodeChunk(0, chunk, pos, end == kTokens).ok());
      pos = end;
    }
    auto whole_cut = ctx->GetState(0, StatePart::kWhole);
    ASSERT_TRUE(whole_cut.ok());
    EXPECT_EQ(*whole_one_call, *whole_cut) << arch << ": the KV rows of short calls differ";
    EXPECT_TRUE(BitIdentical(logits_one_call, LastLogits(*ctx)))
        << arch << ": the last logits after a 2-row call differ";
  }
}

// A sliding-window model needs nothing set before the call: the window at P is still in its
// (full-size) cache after the call, and the ranged read writes it, with its cell layout, as a
// call that ended at P left it. Two fresh contexts, so that both place their cells alike.
void ExpectWindowsAsCutsLeaveThem(const Model& model, std::span<const Token> tokens,
                                  std::span<const int32_t> points, const ContextOptions& o) {
  auto one = Context::Create(model, o);
  auto cut = Context::Create(model, o);
  ASSERT_TRUE(one.ok() && cut.ok());
  ASSERT_TRUE((*one)->CapturesInCall());
  ASSERT_EQ((*one)->SetCallCaptures(0, points), int32_t(points.size()));
  ASSERT_TRUE((*one)->DecodeChunk(0, tokens, 0, true).ok());
  int32_t pos = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    std::span<const Token> chunk(tokens.data() + pos, size_t(points[i] - pos));
    ASSERT_TRUE((*cut)->DecodeChunk(0, chunk, pos, false).ok());
    pos = points[i];
    std::vector<uint8_t> layout_in_call, layout_cut;
    auto in_call = (*one)->CallCapture(int32_t(i), &layout_in_call);
    auto at_cut = (*cut)->GetState(0, StatePart::kPartial, &layout_cut);
    ASSERT_TRUE(in_call.ok() && at_cut.ok()) << in_call.status().ToString();
    EXPECT_EQ(*in_call, *at_cut) << "window at " << points[i];
    EXPECT_FALSE(layout_cut.empty());
    EXPECT_EQ(layout_in_call, layout_cut) << "cell layout at " << points[i];
  }
  // A position the call did not go past is not captured.
  const std::vector<int32_t> past = {int32_t(tokens.size()) + 10};
  (*one)->SetCallCaptures(0, past);
  EXPECT_FALSE((*one)->CallCapture(0).ok());
}

TEST(CallCaptureTest, AWindowAfterTheCallIsTheWindowACallEndingThereLeaves) {
  const Model* model = CodecModels::Get().Load("gemma3");
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layout(), MemoryLayout::kIswa);
  const std::vector<int32_t> points = {64, 192, 256};
  ExpectWindowsAsCutsLeaveThem(*model, PromptTokens(*model, kTokens), points,
                               CaptureOptions(true, 0));
}

// The same for a window beside MLA and index caches (kDsaIswa: dots3note from llama.cpp's
// generator, a 32-cell window), whose partial state is the window alone.
TEST(CallCaptureTest, AWindowBesideIndexCachesIsTheWindowACallEndingThereLeaves) {
  const Model* model = testing::GeneratedModels::Get().Load("dots3note");
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layout(), MemoryLayout::kDsaIswa);
  const std::vector<int32_t> points = {37, 100, 102, 150};
  for (bool flash_attn : {true, false}) {
    SCOPED_TRACE(flash_attn ? "flash attention" : "no flash attention");
    ContextOptions o = CaptureOptions(flash_attn, 0);
    o.n_ctx_per_seq = o.n_batch = o.n_ubatch = 256;  // the generated model's trained context
    ExpectWindowsAsCutsLeaveThem(*model, testing::GeneratedTokens(*model, 200), points, o);
  }
}

// A hybrid whose attention layers are all sliding-window (llama_memory_hybrid_iswa: LFM2 with
// a window, from llama.cpp's generator, 32 cells) captures its short-convolution state inside
// the call and reads its window at the capture after the call (llama.cpp patch 0014): bytes and
// cell layout equal what calls ending at each point leave, and the call computes the same
// logits. Two fresh contexts, so that both place their cells alike.
TEST(CallCaptureTest, AHybridWithAWindowCapturesAsACallEndingThereLeaves) {
  const Model* model = testing::GeneratedModels::Get().Load("lfm2");
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layout(), MemoryLayout::kHybridIswa);
  constexpr int32_t kN = 200;  // inside the generated model's trained 256
  const std::vector<Token> tokens = testing::GeneratedTokens(*model, kN);
  const std::vector<int32_t> points = {37, 100, 102, 150};
  for (bool flash_attn : {true, false}) {
    SCOPED_TRACE(flash_attn ? "flash attention" : "no flash attention");
    ContextOptions o = CaptureOptions(flash_attn, 16);
    o.n_ctx_per_seq = o.n_batch = o.n_ubatch = 256;
    auto one = Context::Create(*model, o);
    auto cut = Context::Create(*model, o);
    ASSERT_TRUE(one.ok() && cut.ok());
    ASSERT_TRUE((*one)->CapturesInCall());
    ASSERT_EQ((*one)->SetCallCaptures(0, points), int32_t(points.size()));
    ASSERT_TRUE((*one)->DecodeChunk(0, tokens, 0, true).ok());
    int32_t pos = 0;
    std::vector<int32_t> ends = points;
    ends.push_back(kN);
    for (size_t i = 0; i < ends.size(); ++i) {
      std::span<const Token> chunk(tokens.data() + pos, size_t(ends[i] - pos));
      ASSERT_TRUE((*cut)->DecodeChunk(0, chunk, pos, ends[i] == kN).ok());
      pos = ends[i];
      std::vector<uint8_t> layout_one, layout_cut;
      auto at_cut = (*cut)->GetState(0, StatePart::kPartial, &layout_cut);
      auto in_call = i < points.size() ? (*one)->CallCapture(int32_t(i), &layout_one)
                                       : (*one)->GetState(0, StatePart::kPartial, &layout_one);
      ASSERT_TRUE(in_call.ok() && at_cut.ok()) << in_call.status().ToString();
      EXPECT_EQ(*in_call, *at_cut) << "state at " << ends[i];
      EXPECT_FALSE(layout_cut.empty());
      EXPECT_EQ(layout_one, layout_cut) << "cell layout at " << ends[i];
    }
    EXPECT_TRUE(BitIdentical(LastLogits(**one), LastLogits(**cut)))
        << "capturing changed what the call computed";
  }
}

TEST(CallCaptureLimitsTest, OnlyWhereTheGraphCanAndAsManyAsAsked) {
  const Model* qwen35 = CodecModels::Get().Load("qwen35");
  const Model* llama = CodecModels::Get().Load("llama");
  ASSERT_TRUE(qwen35 && llama);
  EXPECT_FALSE(NewContext(*qwen35, true, 0)->CapturesInCall());  // none asked for
  EXPECT_FALSE(NewContext(*llama, true, 16)->CapturesInCall());   // no recurrent state
  auto ctx = NewContext(*qwen35, true, 4);
  ASSERT_TRUE(ctx->CapturesInCall());
  const std::vector<int32_t> six = {10, 20, 30, 40, 50, 400};
  EXPECT_EQ(ctx->SetCallCaptures(0, six), 4);  // the first 4: the context keeps 4
  const std::vector<Token> tokens = PromptTokens(*qwen35, 64);
  const std::vector<int32_t> outside = {64, 100};  // the call's end and past it: not inside
  EXPECT_EQ(ctx->SetCallCaptures(0, outside), 2);
  ASSERT_TRUE(ctx->DecodeChunk(0, tokens, 0, true).ok());
  EXPECT_FALSE(ctx->CallCapture(0).ok());
  EXPECT_FALSE(ctx->CallCapture(1).ok());
  // Another sequence's capture is not taken by this sequence's call.
  const std::vector<int32_t> other = {80};
  ctx->SetCallCaptures(1, other);
  ASSERT_TRUE(ctx->DecodeChunk(0, tokens, 64, true).ok());
  EXPECT_FALSE(ctx->CallCapture(0).ok());
}

}  // namespace
}  // namespace prefixd::engine
