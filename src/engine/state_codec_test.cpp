// State codec against the pinned llama.cpp, for every test-model architecture:
//  (a) parse -> emit is byte-identical;
//  (b) rows cut from a later state + the partial at P restore a state whose next logits are
//      bit-identical to a cold run with the same chunking;
//  (c) the same at a P that is no block or ubatch multiple, from several (partly used) payloads;
//  (d) a missing partial, a partial from another position or model, and mismatched rows are
//      refused.
#include "engine/codec/state_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/state_codec_test_util.h"
#include "engine/worker_parts.h"
#include "llama.h"

namespace prefixd::engine {
namespace {

using testing::BitIdentical;
using testing::Captured;
using testing::CodecContextOptions;
using testing::CodecModels;
using testing::DecodeTail;
using testing::LogitsDiff;
using testing::MaxAbsDiff;
using testing::PrefillAndCapture;
using testing::PromptTokens;

constexpr int32_t kQ = 128;
constexpr int32_t kTail = 8;  // tokens decoded after the restore

// A rows payload covering [p0, p1), of which the first `used` tokens are given to assemble.
struct Piece {
  int32_t p0, p1;
  uint32_t used;
};

class StateCodecTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = CodecModels::Get().Load(GetParam());
    ASSERT_NE(model_, nullptr);
    tokens_ = PromptTokens(*model_, kQ + kTail);
  }

  std::unique_ptr<Context> NewContext(bool flash_attn) {
    auto ctx = Context::Create(*model_, CodecContextOptions(flash_attn));
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    return ctx.ok() ? std::move(ctx).value() : nullptr;
  }

  // Encodes the pieces from the state at Q and assembles them with `partial`. With `gathered`,
  // also as StatePieces pointing into `*payloads`.
  Result<std::vector<uint8_t>> Assemble(const Captured& c, const std::vector<Piece>& pieces,
                                        std::span<const uint8_t> partial, int32_t expected_p,
                                        std::vector<std::vector<uint8_t>>* payloads = nullptr,
                                        StatePieces* gathered = nullptr) {
    PREFIXD_ASSIGN_OR_RETURN(ParsedState at_q, ParseState(c.whole, model_->layout()));
    PREFIXD_ASSIGN_OR_RETURN(StateShape shape, StateShapeOf(at_q));
    std::vector<std::vector<uint8_t>> own;
    if (payloads == nullptr) payloads = &own;
    for (const Piece& p : pieces) {
      PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, EncodeRows(at_q, p.p0, p.p1));
      payloads->push_back(std::move(payload));
    }
    std::vector<RowsRef> refs;
    for (size_t i = 0; i < pieces.size(); ++i) refs.push_back({(*payloads)[i], pieces[i].used});
    if (gathered) {
      PREFIXD_RETURN_IF_ERROR(AssembleStatePieces(refs, partial, shape, expected_p, gathered));
    }
    return AssembleState(refs, partial, shape, expected_p);
  }

  // The partial to pass for position p: empty for attention-only models.
  std::span<const uint8_t> PartialAt(const Captured& c, int32_t p) const {
    if (!LayoutNeedsSnapshot(model_->layout())) return {};
    return c.partial_at.at(p);
  }

  std::vector<Piece> Rows(std::vector<Piece> pieces) const {
    return LayoutHasRows(model_->layout()) ? pieces : std::vector<Piece>{};
  }

  // (b)/(c): restore [0, p) into seq 1 and compare the logits of [p, p+kTail) with a cold run
  // in seq 0 whose chunks of [0, p) end at `ends` too.
  void ExpectRestoreMatchesCold(Context& ctx, const Captured& c, int32_t p,
                                const std::vector<Piece>& pieces,
                                const std::vector<int32_t>& ends) {
    SCOPED_TRACE("P=" + std::to_string(p) + ", " + std::to_string(pieces.size()) + " payloads");
    std::vector<std::vector<uint8_t>> payloads;
    StatePieces gathered;
    auto assembled = Assemble(c, Rows(pieces), PartialAt(c, p), p, &payloads, &gathered);
    ASSERT_TRUE(assembled.ok()) << assembled.status().ToString();
    // The assembled state is the state a cold run holds at p, byte for byte.
    EXPECT_TRUE(*assembled == c.whole_at.at(p)) << "assembled " << assembled->size()
                                                << " bytes, native " << c.whole_at.at(p).size();
    // The pieces are the same bytes, and setting them (llama.cpp reading through the pieces)
    // leaves the sequence exactly as setting the assembled buffer does.
    std::vector<uint8_t> joined;
    for (auto piece : gathered.pieces) joined.insert(joined.end(), piece.begin(), piece.end());
    EXPECT_TRUE(joined == *assembled) << gathered.pieces.size() << " pieces";
    EXPECT_EQ(gathered.size, assembled->size());
    if (gathered.pieces.size() > 1) {  // pieces that end early: refused, the sequence empty
      auto cut = std::span(gathered.pieces).first(gathered.pieces.size() - 1);
      EXPECT_FALSE(ctx.SetStatePieces(1, cut, gathered.size).ok());
      EXPECT_EQ(ctx.SeqPosMax(1), -1);
    }
    // The cell layout the cold run's sliding-window caches hold (empty without one): with it
    // the restored cells lie where the cold run's lie, which is what makes the logits
    // bit-identical on every CPU kernel path (docs/exactness.md).
    const std::vector<uint8_t>& layout = c.layout_at.at(p);
    EXPECT_EQ(layout.empty(), !LayoutHasSlidingWindow(model_->layout()));
    ASSERT_TRUE(ctx.SetState(1, *assembled, StatePart::kWhole, layout).ok());
    auto set_plain = ctx.GetState(1, StatePart::kWhole);
    ASSERT_TRUE(ctx.SetStatePieces(1, gathered.pieces, gathered.size, {}, {}, layout).ok());
    auto set_gathered = ctx.GetState(1, StatePart::kWhole);
    ASSERT_TRUE(set_plain.ok() && set_gathered.ok());
    EXPECT_TRUE(*set_plain == *set_gathered) << "the gathered set differs from the plain one";
    EXPECT_EQ(ctx.SeqPosMax(1), p - 1);
    auto warm = DecodeTail(ctx, 1, tokens_, p, kTail);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();

    std::vector<int32_t> cold_ends;
    for (int32_t e : ends) {
      if (e <= p) cold_ends.push_back(e);
    }
    ctx.SeqClear(0);
    ASSERT_TRUE(Prefill(ctx, 0, std::span<const Token>(tokens_.data(), size_t(p)), 0, cold_ends)
                    .ok());
    auto cold = DecodeTail(ctx, 0, tokens_, p, kTail);
    ASSERT_TRUE(cold.ok()) << cold.status().ToString();
    EXPECT_TRUE(BitIdentical(*warm, *cold)) << "warm and cold logits differ: "
                                            << LogitsDiff(*warm, *cold);
    ctx.SeqClear(1);
    if (layout.empty()) return;
    // Without the layout (the unpatched read) the window's cells lie from cell 0, so masked
    // attention adds the same terms in another order: whether a last bit moves depends on the
    // CPU's kernels (it does on AVX2-only x86, not on AVX-512). Only closeness is guaranteed;
    // a wrong state is off by far more than this bound.
    ASSERT_TRUE(ctx.SetStatePieces(1, gathered.pieces, gathered.size).ok());
    auto plain = DecodeTail(ctx, 1, tokens_, p, kTail);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_LE(MaxAbsDiff(*plain, *cold), 1e-3) << LogitsDiff(*plain, *cold);
    std::printf("[ layout   ] %-14s P=%d without the cell layout: %s\n", GetParam().c_str(), p,
                LogitsDiff(*plain, *cold).c_str());
    ctx.SeqClear(1);
  }

  const Model* model_ = nullptr;
  std::vector<Token> tokens_;
};

void ExpectEmitIdentical(std::span<const uint8_t> bytes, MemoryLayout layout, bool partial) {
  auto parsed = partial ? ParsePartialState(bytes, layout) : ParseState(bytes, layout);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto emitted = EmitState(*parsed);
  ASSERT_TRUE(emitted.ok()) << emitted.status().ToString();
  EXPECT_TRUE(std::equal(emitted->begin(), emitted->end(), bytes.begin(), bytes.end()))
      << (partial ? "partial" : "whole") << " state of " << bytes.size() << " bytes";
}

// (a), and the sizes.
TEST_P(StateCodecTest, ParseEmitIsByteIdentical) {
  auto ctx = NewContext(false);
  ASSERT_NE(ctx, nullptr);
  const MemoryLayout layout = model_->layout();
  auto empty = ctx->GetState(1, StatePart::kWhole);
  ASSERT_TRUE(empty.ok());
  ExpectEmitIdentical(*empty, layout, false);
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {37, 64, kQ});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectEmitIdentical(c->whole, layout, false);
  for (const auto& [p, bytes] : c->whole_at) ExpectEmitIdentical(bytes, layout, false);
  if (layout != MemoryLayout::kAttention) {
    for (const auto& [p, bytes] : c->partial_at) ExpectEmitIdentical(bytes, layout, true);
  }

  auto parsed = ParseState(c->whole, layout);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->has_rows, LayoutHasRows(layout));
  EXPECT_EQ(parsed->partial.size + 8 == c->partial_at.at(kQ).size(),
            layout != MemoryLayout::kAttention)
      << "the partial section of the whole state is the body of GetState(kPartial)";
  const size_t whole = c->whole.size();
  const size_t part = layout == MemoryLayout::kAttention ? 0 : c->partial_at.at(kQ).size();
  std::printf("[ sizes    ] %-14s %-11s Q=%d whole %zu B (%.0f B/token), partial %zu B "
              "(%.0f B/token), rows %zu B/token\n",
              GetParam().c_str(), MemoryLayoutName(layout), kQ, whole, double(whole) / kQ, part,
              double(part) / kQ, parsed->has_rows ? (whole - part) / kQ : size_t(0));
}

// (b): P = 64, a chunk end, rows cut from the state at Q = 128; flash attention off and on
// (V transposed and not).
TEST_P(StateCodecTest, RestoreMatchesColdRun) {
  for (bool fa : {false, true}) {
    SCOPED_TRACE(fa ? "flash attention" : "no flash attention");
    auto ctx = NewContext(fa);
    ASSERT_NE(ctx, nullptr);
    const std::vector<int32_t> ends = {64};
    auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, ends);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (LayoutHasRows(model_->layout())) {
      auto parsed = ParseState(c->whole, model_->layout());
      ASSERT_TRUE(parsed.ok());
      EXPECT_EQ(parsed->kv.streams[0].v_trans, !fa);
    }
    ExpectRestoreMatchesCold(*ctx, *c, 64, {{0, 64, 64}}, ends);
  }
}

// (c): P = 37 (no multiple of the ubatch or a block), one payload and several, the last one
// used partially.
TEST_P(StateCodecTest, RestoreAtOddPositionFromSeveralPayloads) {
  auto ctx = NewContext(false);
  ASSERT_NE(ctx, nullptr);
  const std::vector<int32_t> ends = {37};
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, ends);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectRestoreMatchesCold(*ctx, *c, 37, {{0, 37, 37}}, ends);
  ExpectRestoreMatchesCold(*ctx, *c, 37, {{0, 16, 16}, {16, 32, 16}, {32, 37, 5}}, ends);
  ExpectRestoreMatchesCold(*ctx, *c, 37, {{0, 16, 16}, {16, 32, 16}, {32, 48, 5}}, ends);
  ExpectRestoreMatchesCold(*ctx, *c, 37, {{0, 20, 10}, {10, 37, 27}}, ends);
}

// (d): everything that must be refused.
TEST_P(StateCodecTest, RefusesWhatDoesNotFit) {
  auto ctx = NewContext(false);
  ASSERT_NE(ctx, nullptr);
  const MemoryLayout layout = model_->layout();
  const std::vector<int32_t> ends = {30, 37};
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, ends);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<Piece> rows = Rows({{0, 37, 37}});

  if (LayoutNeedsSnapshot(layout)) {
    auto missing = Assemble(*c, rows, {}, 37);
    EXPECT_FALSE(missing.ok()) << "assembled without the partial";
    // Taken at 30, used at 37: the SWA cells and the recurrent cell carry their position.
    auto wrong_pos = Assemble(*c, rows, c->partial_at.at(30), 37);
    EXPECT_FALSE(wrong_pos.ok()) << "assembled with a partial taken at another position";
    if (!wrong_pos.ok()) std::printf("[ refused  ] %s\n", wrong_pos.status().ToString().c_str());
  } else {
    auto with_partial = Assemble(*c, rows, c->partial_at.at(37), 37);
    EXPECT_FALSE(with_partial.ok()) << "an attention-only state took a partial";
  }

  // A partial of another architecture with other sizes. (qwen35 and qwen3next have the same
  // tiny recurrent shapes: their partials are indistinguishable by bytes; the cache's model
  // fingerprint keeps them apart.)
  const std::string other_arch = GetParam() == "lfm2" ? "qwen35" : "lfm2";
  const Model* other = CodecModels::Get().Load(other_arch);
  ASSERT_NE(other, nullptr);
  auto other_ctx = Context::Create(*other, CodecContextOptions(false));
  ASSERT_TRUE(other_ctx.ok());
  auto oc = PrefillAndCapture(**other_ctx, 0, PromptTokens(*other, 37), 37, {37});
  ASSERT_TRUE(oc.ok());
  auto foreign = Assemble(*c, rows, oc->partial_at.at(37), 37);
  EXPECT_FALSE(foreign.ok()) << "assembled with a partial of " << other_arch;

  if (!LayoutHasRows(layout)) return;
  // Rows that leave a gap, rows past the expected P, and rows of another model.
  EXPECT_FALSE(Assemble(*c, {{0, 16, 16}, {20, 37, 17}}, PartialAt(*c, 37), 37).ok());
  EXPECT_FALSE(Assemble(*c, {{0, 37, 37}}, PartialAt(*c, 37), 30).ok());
  EXPECT_FALSE(Assemble(*c, {{0, 16, 17}}, PartialAt(*c, 37), -1).ok());
  // Rows of a model with other layer sizes (llama's rows are unlike every other tiny model's;
  // models whose attention layers have equal shapes cannot be told apart by their rows).
  const std::string rows_arch = GetParam() == "llama" ? "qwen35" : "llama";
  const Model* rows_model = CodecModels::Get().Load(rows_arch);
  ASSERT_NE(rows_model, nullptr);
  auto rows_ctx = Context::Create(*rows_model, CodecContextOptions(false));
  ASSERT_TRUE(rows_ctx.ok());
  auto rc = PrefillAndCapture(**rows_ctx, 0, PromptTokens(*rows_model, 37), 37, {});
  ASSERT_TRUE(rc.ok());
  auto rows_whole = ParseState(rc->whole, rows_model->layout());
  ASSERT_TRUE(rows_whole.ok());
  auto foreign_rows = EncodeRows(*rows_whole, 0, 37);
  ASSERT_TRUE(foreign_rows.ok()) << foreign_rows.status().ToString();
  {
    auto at_q = ParseState(c->whole, layout);
    ASSERT_TRUE(at_q.ok());
    auto shape = StateShapeOf(*at_q);
    ASSERT_TRUE(shape.ok());
    const RowsRef ref[] = {{*foreign_rows, 37}};
    auto st = AssembleState(ref, PartialAt(*c, 37), *shape, 37);
    EXPECT_FALSE(st.ok()) << "assembled rows of " << rows_arch;
    if (!st.ok()) std::printf("[ refused  ] %s\n", st.status().ToString().c_str());
  }
  // Rows cut past the end of the state, or backwards.
  auto at_q = ParseState(c->whole, layout);
  ASSERT_TRUE(at_q.ok());
  EXPECT_FALSE(EncodeRows(*at_q, 0, kQ + 1).ok());
  EXPECT_FALSE(EncodeRows(*at_q, 10, 10).ok());
  EXPECT_FALSE(EncodeRows(*at_q, -1, 5).ok());
}

// The ranged read (llama.cpp patch 0001) against the unpatched whole-state read: rows cut
// from GetStateRange(p0, Q) are byte-identical to the same rows cut from GetState(kWhole), for
// ranges that start on and off a block, and a range outside the state is refused.
TEST_P(StateCodecTest, RangedReadEqualsSliceOfWholeState) {
  auto ctx = NewContext(true);
  ASSERT_NE(ctx, nullptr);
  auto c = PrefillAndCapture(*ctx, 0, tokens_, kQ, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  if (!LayoutHasRows(model_->layout())) {  // no rows: a recurrent state is written whole
    auto bytes = ctx->GetStateRange(0, 45, kQ);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(*bytes, c->whole);
    return;
  }
  auto whole = ParseState(c->whole, model_->layout(), model_->has_cell_ext());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  for (auto [p0, p1] : {std::pair{0, kQ}, std::pair{32, kQ}, std::pair{45, 100}, std::pair{96, 97}}) {
    auto bytes = ctx->GetStateRange(0, p0, kQ);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_LT(bytes->size(), c->whole.size() + (p0 == 0 ? 1 : 0)) << p0;
    auto ranged = ParseState(*bytes, model_->layout(), model_->has_cell_ext());
    ASSERT_TRUE(ranged.ok()) << ranged.status().ToString();
    auto from_range = EncodeRows(*ranged, p0, p1);
    auto from_whole = EncodeRows(*whole, p0, p1);
    ASSERT_TRUE(from_range.ok() && from_whole.ok()) << from_range.status().ToString();
    EXPECT_EQ(*from_range, *from_whole) << "[" << p0 << ", " << p1 << ")";
    if (p0 > 0) EXPECT_FALSE(EncodeRows(*ranged, p0 - 1, p1).ok()) << "rows before the range";
  }
  EXPECT_FALSE(ctx->GetStateRange(0, 10, 10).ok());
}

INSTANTIATE_TEST_SUITE_P(Archs, StateCodecTest, ::testing::ValuesIn(TestModelArchs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// One thread owns the llama context: a call from another thread aborts instead of
// quietly creating a second OpenMP thread team.
TEST(ContextTest, RefusesOtherThreads) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        const Model* model = CodecModels::Get().Load("llama");
        auto ctx = Context::Create(*model, CodecContextOptions(true));
        std::thread other([&] { (*ctx)->SeqClear(0); });
        other.join();
      },
      "off its owning thread");
}

// A window-sized sliding cache (what serve gives an iswa model unless --swa-full) is a ring:
// after more positions than a window plus a ubatch, the oldest are overwritten, where a
// full-size cache still holds position 0. Both decode the same rows (the exactness and cache
// tests run the ring: ExactnessTest, EngineCacheTest on gemma3, gpt-oss, gemma4).
TEST(ContextTest, AWindowSizedSlidingCacheIsARing) {
  const Model* model = CodecModels::Get().Load("gemma3");
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layout(), MemoryLayout::kIswa);
  const std::vector<Token> tokens = PromptTokens(*model, 600);
  for (const bool full : {true, false}) {
    ContextOptions o = CodecContextOptions(true);
    o.n_ctx_per_seq = 1024;  // a ring of 256 cells (the 32-token window plus a 32-row ubatch)
    o.swa_full = full;
    auto ctx = Context::Create(*model, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    for (size_t p = 0; p < tokens.size(); p += o.n_ubatch) {
      const size_t n = std::min<size_t>(o.n_ubatch, tokens.size() - p);
      ASSERT_TRUE((*ctx)->DecodeChunk(0, std::span(tokens).subspan(p, n), int32_t(p), false).ok());
    }
    EXPECT_EQ((*ctx)->SeqPosMax(0), 599);
    const llama_pos oldest = llama_memory_seq_pos_min(llama_get_memory((*ctx)->raw()), 0);
    if (full) {
      EXPECT_EQ(oldest, 0) << "a full-size window cache keeps every position";
    } else {
      EXPECT_GE(oldest, 600 - 256) << "the ring keeps at most its 256 cells";
      EXPECT_LE(oldest, 600 - 64) << "and at least a window plus a ubatch";
    }
  }
}

// serve's contexts: the ring for an iswa model unless --swa-full; every other model (no
// window, or a window beside recurrent or compressed caches) the full size.
TEST(ContextTest, ServeGivesOnlyIswaModelsTheRing) {
  EngineOptions eo;
  const Model* gemma3 = CodecModels::Get().Load("gemma3");
  const Model* llama = CodecModels::Get().Load("llama");
  ASSERT_TRUE(gemma3 != nullptr && llama != nullptr);
  EXPECT_FALSE(ContextOptionsFor(*gemma3, eo).swa_full);
  EXPECT_TRUE(ContextOptionsFor(*llama, eo).swa_full);
  eo.swa_full = true;
  EXPECT_TRUE(ContextOptionsFor(*gemma3, eo).swa_full);
}

}  // namespace
}  // namespace prefixd::engine
