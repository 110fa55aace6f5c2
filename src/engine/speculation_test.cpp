// Speculative decoding: the flags in llama-server's words, pools kept per cache domain, and
// greedy output with speculation equal to greedy output without it on every rollback kind.
// The cache suites with speculation on are EngineCacheTest's SpecArchs (engine_test.cpp).
#include "engine/speculation.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "common.h"
#include "cache/domain_registry.h"
#include "engine/context.h"
#include "engine/engine.h"
#include "engine/mtp_sidecar.h"
#include "engine/model/model.h"
#include "engine/engine_flags.h"
#include "engine/near_tie_test_util.h"
#include "engine/test_temp_dir.h"
#include "engine/testgen/test_model.h"

namespace prefixd::engine {
namespace {

using testing::EagerNgram;
using testing::SameUpToNearTie;

TEST(SpecFlags, TypesInLlamaServersNames) {
  auto types = ParseSpecTypes("ngram-mod,ngram-simple,ngram-mod");
  ASSERT_TRUE(types.ok()) << types.status().ToString();
  EXPECT_EQ(*types, (std::vector<SpecType>{SpecType::kNgramMod, SpecType::kNgramSimple}));
  EXPECT_EQ(SpecTypesName(*types), "ngram-mod,ngram-simple");
  EXPECT_TRUE(ParseSpecTypes("none")->empty());
  EXPECT_TRUE(ParseSpecTypes("")->empty());
  auto unknown = ParseSpecTypes("ngram-mod,eagle9");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("eagle9"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("ngram-map-k4v"), std::string::npos);
}

// A flag left out means what it means to llama-server built from the same source.
TEST(SpecFlags, DefaultsAreLlamaCppCommons) {
  const SpecOptions ours;
  const common_params_speculative theirs;
  EXPECT_EQ(ours.draft_n_max, theirs.draft.n_max);
  EXPECT_EQ(ours.draft_n_min, theirs.draft.n_min);
  EXPECT_EQ(ours.draft_p_min, theirs.draft.p_min);
  EXPECT_EQ(ours.ngram_mod_n_match, theirs.ngram_mod.n_match);
  EXPECT_EQ(ours.ngram_mod_n_max, theirs.ngram_mod.n_max);
  EXPECT_EQ(ours.ngram_mod_n_min, theirs.ngram_mod.n_min);
  for (const auto& [o, t] : {std::pair{ours.ngram_simple, theirs.ngram_simple},
                             std::pair{ours.ngram_map_k, theirs.ngram_map_k},
                             std::pair{ours.ngram_map_k4v, theirs.ngram_map_k4v}}) {
    EXPECT_EQ(o.size_n, t.size_n);
    EXPECT_EQ(o.size_m, t.size_m);
    EXPECT_EQ(o.min_hits, t.min_hits);
  }
}

TEST(SpecFlags, ValuesAreChecked) {
  EngineFlagValues v;
  v.spec.types = "ngram-mod";
  v.spec.mod_n_max = 16;
  v.spec.mod_n_min = 8;
  auto ok = ToEngineOptions(v);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->spec.types, std::vector<SpecType>{SpecType::kNgramMod});
  EXPECT_EQ(ok->spec.ngram_mod_n_max, 16);
  v.spec.mod_n_min = 17;  // above n-max
  EXPECT_EQ(ToEngineOptions(v).status().code(), Status::Code::kInvalidArgument);
  v = EngineFlagValues{};
  v.spec.types = "ngram-simple";
  v.spec.simple.size_n = 0;
  EXPECT_EQ(ToEngineOptions(v).status().code(), Status::Code::kInvalidArgument);
  v = EngineFlagValues{};
  v.spec.types = "draft-mtp";
  ok = ToEngineOptions(v);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->spec.types, std::vector<SpecType>{SpecType::kDraftMtp});
  v.spec.types = "draft-eagle3";
  EXPECT_EQ(ToEngineOptions(v).status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(ToEngineOptions(EngineFlagValues{})->spec.types.empty());  // off by default
}

std::vector<Token> RandomTokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Token> t(n);
  for (Token& x : t) x = Token(100 + rng() % 5000);
  return t;
}

// Tokens every test vocabulary has (the byte tokens' range): prompts for the MTP test model,
// whose vocabulary is small.
std::vector<Token> ByteTokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Token> t(n);
  for (Token& x : t) x = Token(1 + rng() % 250);
  return t;
}

// No tenant's text drafts another's: the same history drafts what followed it in its own
// domain's text, and nothing in a domain that never saw that text.
TEST(DrafterTest, PoolsAreKeptPerDomain) {
  SpecOptions o;
  o.types = {SpecType::kNgramMod};
  auto drafter = Drafter::Create(o, 2);
  ASSERT_TRUE(drafter.ok()) << drafter.status().ToString();
  const std::vector<Token> text = RandomTokens(400, 1);
  const Digest a{1}, b{2};
  // Domain a read the whole text once; then both sequences have read its first 200 tokens.
  std::vector<Token> seen_a = text;
  seen_a.insert(seen_a.end(), text.begin(), text.begin() + 200);
  const std::vector<Token> history(text.begin(), text.begin() + 199);
  (*drafter)->Begin(0, a, seen_a);
  (*drafter)->Begin(1, b, history);
  std::vector<Token> hist_a(seen_a.begin(), seen_a.end() - 1);
  EXPECT_TRUE((*drafter)->Draft(1, history, text[199], 199, 16).empty());
  const std::vector<Token> drafted_a = (*drafter)->Draft(0, hist_a, text[199], 599, 16);
  ASSERT_EQ(drafted_a.size(), 16u);
  EXPECT_TRUE(std::equal(drafted_a.begin(), drafted_a.end(), text.begin() + 200));
  (*drafter)->Accept(0, 16);
  (*drafter)->End(0);
  (*drafter)->End(1);
  // A third domain replaces the pool no sequence drafts with that was used least recently
  // (b's); a's stays.
  (*drafter)->Begin(1, Digest{3}, history);
  (*drafter)->End(1);
  (*drafter)->Begin(0, a, history);
  EXPECT_EQ((*drafter)->Draft(0, history, text[199], 199, 16).size(), 16u);
}

TEST(DrafterTest, ADraftTypeNeedsADraftModel) {
  SpecOptions o;
  o.types = {SpecType::kDraft};
  auto drafter = Drafter::Create(o, 1);
  ASSERT_FALSE(drafter.ok());
  EXPECT_EQ(drafter.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(drafter.status().message().find("--model-draft"), std::string::npos);
}

std::string ModelPath(const std::string& arch) {
  static std::map<std::string, std::string> made;
  if (auto it = made.find(arch); it != made.end()) return it->second;
  auto dir = std::filesystem::temp_directory_path() / ("prefixd-spec-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(testing::RemoveAtExit(dir.string()));
  const std::string path = (dir / (arch + ".gguf")).string();
  Status st = MakeTestModel({arch, "tiny", 7}, path);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return made[arch] = path;
}

std::unique_ptr<Engine> MakeEngine(const std::string& arch, const SpecOptions& spec,
                                   uint32_t slots = 1) {
  EngineOptions o;
  o.n_slots = slots;
  o.model_path = ModelPath(arch);
  o.cache_enabled = false;
  o.n_ctx_per_slot = 1024;
  o.n_batch = 256;
  o.n_ubatch = 256;
  o.n_threads = 2;
  o.spec = spec;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

SpecOptions NgramMod() {
  SpecOptions s;
  s.types = {SpecType::kNgramMod};
  return s;
}


const char* kCode =
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
    "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n\ndef";

CompletionRequest Request(const Engine& e, int max_tokens, const std::string& text = kCode) {
  CompletionRequest r;
  r.prompt = *e.PrepareText(text);
  r.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

enum class Drafting {
  kNgramMod,        // NgramMod
  kEagerPenalized,  // EagerNgram, and a presence penalty that stops the model repeating itself
  kDraftModel,      // llama's test model drafts (the model itself, for llama)
};

struct SpecCase {
  std::string arch;
  Drafting drafting;
};

SpecOptions OptionsFor(Drafting d) {
  if (d == Drafting::kNgramMod) return NgramMod();
  if (d == Drafting::kEagerPenalized) return EagerNgram();
  SpecOptions s;
  s.types = {SpecType::kDraft};
  s.draft_model_path = ModelPath("llama");
  s.draft_n_max = 8;
  return s;
}

class GreedySpeculation : public ::testing::TestWithParam<SpecCase> {};

// Greedy output with speculation equals greedy output without it: token for token, or up to a
// near-tie (of the logits before the penalty, for the penalized case), since a draft is verified in a call of several rows, whose logits differ from a
// one-row call's in the last bits (docs/speculation.md). The committed state after a
// rollback is the one the next tokens are decoded on, so a wrong rollback shows as a
// difference far beyond a near-tie within a few tokens.
TEST_P(GreedySpeculation, EqualsGreedyWithout) {
  const SpecCase& c = GetParam();
  auto plain = MakeEngine(c.arch, SpecOptions{});
  const bool penalized = c.drafting == Drafting::kEagerPenalized;
  auto spec = MakeEngine(c.arch, OptionsFor(c.drafting));
  ASSERT_TRUE(plain && spec);
  ASSERT_EQ(spec->GetStats().speculation, SpecTypesName(OptionsFor(c.drafting).types));
  CompletionRequest req = Request(*plain, 160);
  if (penalized) req.sampling.presence_penalty = 1.5;
  req.sampling.top_logprobs = 2;
  auto cold = plain->Complete(req);
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  int steps = 0;
  for (int round = 0; round < 2; ++round) {  // the second with what the pool learnt
    CompletionRequest sreq = Request(*spec, 160);
    sreq.sampling.presence_penalty = req.sampling.presence_penalty;
    auto got = spec->Complete(sreq);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(SameUpToNearTie(*got, *cold)) << c.arch << " round " << round;
    const Usage& u = got->usage;
    std::printf("[ spec ] %s %s round %d: %d drafted, %d taken, %d steps, %d replays\n",
                c.arch.c_str(), SpecTypesName(OptionsFor(c.drafting).types).c_str(), round, u.draft_tokens,
                u.draft_accepted, u.draft_steps, u.draft_replays);
    EXPECT_LE(u.draft_accepted, u.draft_tokens);
    EXPECT_LT(u.draft_steps, got->usage.completion_tokens);
    steps += u.draft_steps;
    if (c.drafting == Drafting::kDraftModel && c.arch == "llama") {  // the model drafts itself
      EXPECT_GE(u.draft_accepted, u.draft_tokens * 9 / 10);
    }
    if (!penalized) continue;
    // The model stops repeating itself and the drafts repeat it: rejections in every round,
    // at the draft's first position too, and a replay for each where the rollback is one.
    EXPECT_GT(u.draft_steps, 0);
    EXPECT_LT(u.draft_accepted, u.draft_tokens) << "no draft was rejected";
    if (spec->GetStats().spec_rollback == "checkpoint") EXPECT_GT(u.draft_replays, 0);
  }
  EXPECT_GT(steps, 0) << "nothing was drafted";
}

std::vector<SpecCase> Cases() {
  std::vector<SpecCase> out;
  std::vector<std::string> archs = TestModelArchs();
  archs.push_back("deepseek2");  // MLA
  for (const std::string& a : archs) {
    out.push_back({a, Drafting::kNgramMod});
    out.push_back({a, Drafting::kEagerPenalized});
    // A draft model on one model of each rollback (a poorly matched draft is slow to verify).
    for (const char* d : {"llama", "qwen35", "mamba2", "gemma3"}) {
      if (a == d) out.push_back({a, Drafting::kDraftModel});
    }
  }
  return out;
}

std::string CaseName(const ::testing::TestParamInfo<SpecCase>& info) {
  static const char* kNames[] = {"_ngram_mod", "_eager_penalized", "_draft_model"};
  std::string s = info.param.arch + kNames[int(info.param.drafting)];
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(SampleArchs, GreedySpeculation, ::testing::ValuesIn(Cases()), CaseName);

// Two slots speculating in the same calls, drafts rejected in both: each answer is the one a
// single slot without speculation gives. A checkpoint's replay is a decode of its own, so every
// slot reads its logits of the shared call before any slot replays.
class TwoSlotSpeculation : public ::testing::TestWithParam<std::string> {};

TEST_P(TwoSlotSpeculation, EachAnswerEqualsItsAloneWithout) {
  auto plain = MakeEngine(GetParam(), SpecOptions{});
  auto spec = MakeEngine(GetParam(), EagerNgram(), 2);
  ASSERT_TRUE(plain && spec);
  const std::string texts[2] = {kCode, "class Stack:\n    def push(self, x):\n        self.items.append(x)\n"
                                       "    def pop(self):\n        return self.items.pop()\n    def"};
  CompletionResult alone[2], together[2];
  for (int i = 0; i < 2; ++i) {
    CompletionRequest r = Request(*plain, 128, texts[i]);
    r.sampling.presence_penalty = 1.5;
    r.sampling.top_logprobs = 2;
    auto got = plain->Complete(r);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    alone[i] = *got;
  }
  std::vector<std::thread> threads;
  Status status[2];
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      CompletionRequest r = Request(*spec, 128, texts[i]);
      r.sampling.presence_penalty = 1.5;
      auto got = spec->Complete(r);
      status[i] = got.status();
      if (got.ok()) together[i] = *got;
    });
  }
  for (auto& t : threads) t.join();
  int rejected = 0, replays = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(status[i].ok()) << status[i].ToString();
    EXPECT_TRUE(SameUpToNearTie(together[i], alone[i])) << "request " << i;
    const Usage& u = together[i].usage;
    std::printf("[ spec ] %s slot answer %d: %d drafted, %d taken, %d replays\n",
                GetParam().c_str(), i, u.draft_tokens, u.draft_accepted, u.draft_replays);
    rejected += u.draft_tokens - u.draft_accepted;
    replays += u.draft_replays;
  }
  EXPECT_GT(rejected, 0);
  if (spec->GetStats().spec_rollback == "checkpoint") EXPECT_GT(replays, 0);
}

INSTANTIATE_TEST_SUITE_P(Rollbacks, TwoSlotSpeculation,
                         ::testing::Values("llama", "qwen35", "granitehybrid", "mamba2"));

TEST(SpeculationTest, RequestsChooseTheirDraftLength) {
  auto spec = MakeEngine("llama", EagerNgram());
  ASSERT_TRUE(spec);
  CompletionRequest off = Request(*spec, 96);
  off.spec_n_max = 0;
  auto a = spec->Complete(off);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->usage.draft_steps, 0);
  CompletionRequest shortest = Request(*spec, 96);
  shortest.spec_n_max = 2;
  auto b = spec->Complete(shortest);
  ASSERT_TRUE(b.ok());
  EXPECT_GT(b->usage.draft_steps, 0);
  EXPECT_LE(b->usage.draft_tokens, 2 * b->usage.draft_steps);
  CompletionRequest too_long = Request(*spec, 96);
  too_long.spec_n_min = 200;  // no draft is that long
  auto c = spec->Complete(too_long);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->usage.draft_steps, 0);
  EXPECT_EQ(a->tokens, c->tokens);  // neither speculated
}

// `arch`'s test model with an MTP head (made once per arch, next to the plain test models).
std::string MtpModelPath(const std::string& arch = "qwen35") {
  static std::map<std::string, std::string> made;
  if (auto it = made.find(arch); it != made.end()) return it->second;
  const std::string p = ModelPath(arch) + ".mtp.gguf";
  TestModelSpec spec{arch, "tiny", 7};
  spec.nextn_layers = 1;
  Status st = MakeTestModel(spec, p);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return made[arch] = p;
}

std::unique_ptr<Engine> MakeMtpEngine(bool speculate, uint32_t slots = 1) {
  EngineOptions o;
  o.n_slots = slots;
  o.model_path = MtpModelPath();
  o.cache_enabled = false;
  o.n_ctx_per_slot = 1024;
  o.n_batch = 256;
  o.n_ubatch = 256;
  o.n_threads = 2;
  if (speculate) {
    o.spec.types = {SpecType::kDraftMtp};
    o.spec.draft_n_max = 4;
  }
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

CompletionRequest MtpRequest(const Engine& e, int max_tokens, const std::string& text) {
  CompletionRequest r = Request(e, max_tokens, text);
  r.sampling.top_logprobs = 2;  // what SameUpToNearTie judges a near-tie by
  return r;
}

// The model's own MTP head drafts (llama.cpp common's draft-mtp, its context following the
// target's sequences): greedy output equals the model's without speculation, over several
// requests on the same slot (the head's sequence cut back and started afresh between them).
// The test model's head is random, so nearly every draft is rejected at its first position.
TEST(SpeculationTest, MtpHeadDraftsAndGreedyOutputIsUnchanged) {
  auto plain = MakeMtpEngine(false);
  auto spec = MakeMtpEngine(true);
  ASSERT_TRUE(plain && spec);
  EXPECT_EQ(spec->GetStats().speculation, "draft-mtp");
  int drafted = 0;
  for (const std::string& text : {std::string(kCode), std::string(kCode) + " again",
                                  std::string("Hello there. ") + kCode}) {
    auto cold = plain->Complete(MtpRequest(*plain, 96, text));
    auto got = spec->Complete(MtpRequest(*spec, 96, text));
    ASSERT_TRUE(cold.ok() && got.ok());
    EXPECT_TRUE(SameUpToNearTie(*got, *cold));
    const Usage& u = got->usage;
    std::printf("[ spec ] qwen35 draft-mtp: %d drafted, %d taken, %d steps\n", u.draft_tokens,
                u.draft_accepted, u.draft_steps);
    EXPECT_LE(u.draft_accepted, u.draft_tokens);
    drafted += u.draft_tokens;
  }
  EXPECT_GT(drafted, 0) << "the MTP head drafted nothing";
}

// Two slots decode in one batch and both drafts go through the head in one call.
TEST(SpeculationTest, MtpHeadTwoSlotsEachEqualsItsAlone) {
  auto plain = MakeMtpEngine(false);
  auto spec = MakeMtpEngine(true, 2);
  ASSERT_TRUE(plain && spec);
  const std::string texts[2] = {kCode, std::string("Some other text first. ") + kCode};
  std::vector<std::shared_ptr<Completion>> runs;
  for (const std::string& t : texts) {
    auto c = spec->Start(MtpRequest(*spec, 80, t));
    ASSERT_TRUE(c.ok());
    runs.push_back(*c);
  }
  for (int i = 0; i < 2; ++i) {
    auto got = Drain(*runs[size_t(i)]);
    auto alone = plain->Complete(MtpRequest(*plain, 80, texts[i]));
    ASSERT_TRUE(got.ok() && alone.ok());
    EXPECT_TRUE(SameUpToNearTie(*got, *alone)) << "slot " << i;
  }
}

// The MTP test model loaded with its head, a context of two sequences and a Drafter whose MTP
// head follows it: what the carry and sidecar tests work on.
struct MtpRig {
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Drafter> drafter;
  bool ok = false;
  MtpRig(uint32_t n_ctx, uint32_t n_batch, const std::string& arch = "qwen35") {
    auto m = Model::Load({MtpModelPath(arch), 0, false, /*load_mtp=*/true});
    if (!m.ok()) return;
    model = std::move(m).value();
    ContextOptions copt;
    copt.n_ctx_per_seq = n_ctx;
    copt.n_seq = 2;
    copt.n_batch = copt.n_ubatch = n_batch;
    copt.n_threads = 2;
    auto c = Context::Create(*model, copt);
    if (!c.ok()) return;
    ctx = std::move(c).value();
    SpecOptions o;
    o.types = {SpecType::kDraftMtp};
    o.draft_n_max = 2;
    auto d = Drafter::Create(o, 2);
    if (!d.ok()) return;
    drafter = std::move(d).value();
    ok = drafter->AttachMtpHead(*ctx, copt).ok();
  }
};

// Patch 0007's carry: what the head pairs with a sequence's next token. A decode through the
// follower leaves a row there; a row set is the row read back; a row of the wrong width is
// refused. The second sequence, never decoded, carries zeros.
TEST(DrafterTest, MtpCarryIsReadAndSetPerSequence) {
  MtpRig rig(256, 64);
  ASSERT_TRUE(rig.ok);
  const std::vector<Token> tokens = ByteTokens(20, 3);
  ASSERT_TRUE(rig.ctx->DecodeChunk(0, tokens, 0, true).ok());
  rig.drafter->Begin(0, Digest{}, tokens);
  EXPECT_EQ(rig.drafter->mtp_head()->SeqPosMax(0), 19);  // the head followed the decode
  std::vector<float> h0, h1;
  ASSERT_TRUE(rig.drafter->MtpCarry(0, &h0));
  ASSERT_TRUE(rig.drafter->MtpCarry(1, &h1));
  ASSERT_EQ(h0.size(), size_t(llama_model_n_embd_out(rig.model->raw())));
  EXPECT_TRUE(std::any_of(h0.begin(), h0.end(), [](float x) { return x != 0; }));
  EXPECT_TRUE(std::all_of(h1.begin(), h1.end(), [](float x) { return x == 0; }));
  ASSERT_TRUE(rig.drafter->SetMtpCarry(1, h0));
  ASSERT_TRUE(rig.drafter->MtpCarry(1, &h1));
  EXPECT_EQ(h1, h0);
  EXPECT_FALSE(rig.drafter->SetMtpCarry(1, std::vector<float>(h0.size() + 1, 1.0f)));
  ASSERT_TRUE(rig.drafter->MtpCarry(1, &h1));
  EXPECT_EQ(h1, h0);
  rig.drafter->End(0);
}

// An MtpRig with a RAM cache of 128-token Blocks (with Snapshots or without, as the target's
// cache would be) and a sidecar over it. Decode runs `tokens` on sequence 0 in calls of 128.
struct SidecarRig {
  MtpRig rig;
  cache::PrefixCache ram;
  cache::TieredCache tiers;
  std::unique_ptr<MtpSidecar> sidecar;  // null when the rig or the sidecar did not start
  SidecarRig(const std::string& arch, bool snapshots)
      : rig(1024, 128, arch), ram(CacheOptions(snapshots)), tiers(ram, {}) {
    if (!rig.ok) return;
    auto s = MtpSidecar::Create(*rig.drafter, tiers, 128, 1);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) sidecar = std::move(s).value();
  }
  static cache::PrefixCache::Options CacheOptions(bool snapshots) {
    cache::PrefixCache::Options co;
    co.block_size = 128;
    co.ram_budget_bytes = 64u << 20;
    co.has_rows = true;
    co.needs_snapshot = snapshots;
    return co;
  }
  bool Decode(const std::vector<Token>& tokens) {
    for (int32_t at = 0; at < int32_t(tokens.size()); at += 128) {
      const size_t n = std::min<size_t>(128, tokens.size() - size_t(at));
      if (!rig.ctx->DecodeChunk(0, std::span(tokens).subspan(size_t(at), n), at, false).ok()) {
        return false;
      }
    }
    return true;
  }
};

// The sidecar's round trip, bit for bit: the head's history of a prompt decoded on sequence 0,
// published, then restored into sequence 1, gives sequence 1 the same head rows (the codec's
// rows payloads of both equal byte for byte) and the same carry. A position without a head
// Snapshot, and a head Snapshot whose carry is damaged, restore nothing and leave the
// sequence empty.
TEST(MtpSidecarTest, HistoryRoundTripsBitForBit) {
  SidecarRig r("qwen35", /*snapshots=*/true);
  ASSERT_TRUE(r.sidecar);
  const std::vector<Token> tokens = ByteTokens(300, 5);
  ASSERT_TRUE(r.Decode(tokens));
  auto carry = r.sidecar->TakeCarry(0);
  ASSERT_TRUE(carry.ok());
  const Digest domain{7};
  PendingSnapshot end{300, cache::SnapshotKind::kMessage, {}, *carry};
  ASSERT_TRUE(r.sidecar->Publish(0, domain, tokens, 0, {&end, 1}).ok());
  Context& head = *r.rig.drafter->mtp_head();
  EXPECT_EQ(r.sidecar->Restore(1, domain, tokens, 300), 300);
  ASSERT_EQ(head.SeqPosMax(1), 299);
  StateFormat format;
  format.cell_ext = r.rig.model->has_cell_ext();
  auto rows_of = [&](int32_t seq) {
    auto state = head.GetState(seq, StatePart::kWhole);
    EXPECT_TRUE(state.ok());
    auto parsed = ParseState(*state, format);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto rows = EncodeRows(*parsed, 0, 300);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? *rows : std::vector<uint8_t>{};
  };
  const std::vector<uint8_t> rows0 = rows_of(0);
  ASSERT_FALSE(rows0.empty());
  EXPECT_EQ(rows_of(1), rows0);
  std::vector<float> h0, h1;
  ASSERT_TRUE(r.rig.drafter->MtpCarry(0, &h0) && r.rig.drafter->MtpCarry(1, &h1));
  EXPECT_EQ(h1, h0);
  // No head Snapshot at 200 (only at 300): nothing restored.
  EXPECT_EQ(r.sidecar->Restore(1, domain, tokens, 200), 0);
  EXPECT_EQ(head.SeqPosMax(1), -1);
  // A carry a float short, at the Block end 256: refused.
  std::vector<uint8_t> bad = *carry;
  bad.resize(bad.size() - 4);
  auto payload = std::make_shared<cache::Payload>();
  payload->bytes = bad;
  r.tiers.InsertSnapshot(MtpSidecar::DomainOf(domain), std::span(tokens).first(256),
                       cache::SnapshotKind::kMessage, payload, nullptr);
  EXPECT_EQ(r.sidecar->Restore(1, domain, tokens, 256), 0);
  EXPECT_EQ(head.SeqPosMax(1), -1);
}

// The same round trip on a pure-attention target (deepseek2's MLA), whose cache keeps no
// Snapshots: every row the head publishes holds the target's hidden row beside it, so a
// restore may end anywhere, inside a Block or a Tail too. At each P the head's rows equal the
// decoded sequence's byte for byte and the carry is the hidden row the follower recorded at
// P - 1 (the carry itself at the end). A restore inside a Block hands its hidden rows back to
// the follower, so the Block's later publish has them. A row payload cut short restores
// nothing.
TEST(MtpSidecarTest, PureAttentionHistoryRestoresAtAnyPosition) {
  SidecarRig r("deepseek2", /*snapshots=*/false);
  ASSERT_TRUE(r.sidecar);
  const std::vector<Token> tokens = ByteTokens(300, 5);
  ASSERT_TRUE(r.Decode(tokens));
  const size_t w = size_t(llama_model_n_embd_out(r.rig.model->raw()));
  std::vector<float> hidden, end_carry;
  ASSERT_TRUE(r.rig.drafter->MtpHiddenRows(0, 0, 300, &hidden));
  ASSERT_TRUE(r.rig.drafter->MtpCarry(0, &end_carry));
  ASSERT_EQ(hidden.size(), 300 * w);
  EXPECT_EQ(std::vector<float>(hidden.end() - ptrdiff_t(w), hidden.end()), end_carry);
  const Digest domain{9};
  PendingSnapshot end{300, cache::SnapshotKind::kMessage, {}, {}};
  ASSERT_TRUE(r.sidecar->Publish(0, domain, tokens, 0, {&end, 1}).ok());
  Context& head = *r.rig.drafter->mtp_head();
  StateFormat format = r.rig.model->state_format();
  format.layout = MemoryLayout::kAttention;
  auto rows_of = [&](int32_t seq, int32_t p) {
    auto state = head.GetState(seq, StatePart::kWhole);
    EXPECT_TRUE(state.ok());
    auto parsed = ParseState(*state, format);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto rows = EncodeRows(*parsed, 0, p);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? *rows : std::vector<uint8_t>{};
  };
  for (int32_t p : {300, 256, 200, 77}) {
    SCOPED_TRACE(p);
    ASSERT_EQ(r.sidecar->Restore(1, domain, tokens, p), p);
    ASSERT_EQ(head.SeqPosMax(1), p - 1);
    EXPECT_EQ(rows_of(1, p), rows_of(0, p));
    std::vector<float> carry;
    ASSERT_TRUE(r.rig.drafter->MtpCarry(1, &carry));
    EXPECT_EQ(carry, std::vector<float>(hidden.begin() + ptrdiff_t((p - 1) * w),
                                        hidden.begin() + ptrdiff_t(p * w)));
  }
  // Restored to 200 (the head only: the target's sequence 1 is empty here), then decoded on to
  // 300: the record holds [128, 200) as restored and continues, so the Block [128, 256) has
  // every hidden row.
  ASSERT_EQ(r.sidecar->Restore(1, domain, tokens, 200), 200);
  std::vector<float> again;
  ASSERT_TRUE(r.rig.drafter->MtpHiddenRows(1, 128, 200, &again));
  EXPECT_EQ(again, std::vector<float>(hidden.begin() + ptrdiff_t(128 * w),
                                      hidden.begin() + ptrdiff_t(200 * w)));
  ASSERT_TRUE(r.rig.ctx->DecodeChunk(1, std::span(tokens).subspan(200, 100), 200, false).ok());
  EXPECT_TRUE(r.rig.drafter->MtpHiddenRows(1, 128, 256, &again));
  // A Tail whose carries are cut short: refused, the sequence left empty.
  auto found = r.tiers.Lookup(MtpSidecar::DomainOf(domain), tokens, 300, 300, cache::Reach::kLocal);
  ASSERT_EQ(found.match.n_tokens, 300u);
  auto bad = std::make_shared<cache::Payload>();
  bad->bytes = found.match.rows.back().rows->bytes;
  bad->bytes.resize(bad->bytes.size() - 4);
  const std::vector<Token> other = [&] {
    std::vector<Token> t(tokens.begin(), tokens.begin() + 290);
    t.push_back(tokens[290] + 1);
    return t;
  }();
  r.tiers.InsertSnapshot(MtpSidecar::DomainOf(domain), std::span(other).first(291),
                       cache::SnapshotKind::kMessage, nullptr, bad);
  EXPECT_EQ(r.sidecar->Restore(1, domain, other, 291), 0);
  EXPECT_EQ(head.SeqPosMax(1), -1);
}

// `model` speculating with `spec`, the cache on (RAM, and disk in `cache_dir`) or off
// (`cache_dir` null).
std::unique_ptr<Engine> MakeSpecCacheEngine(const std::string& model, const SpecOptions& spec,
                                            const std::string* cache_dir, uint32_t slots = 1) {
  EngineOptions o;
  o.model_path = model;
  o.n_slots = slots;
  o.cache_enabled = cache_dir != nullptr;
  if (cache_dir) o.cache_dir = *cache_dir;
  o.n_ctx_per_slot = 1024;
  o.n_batch = 256;
  o.n_ubatch = 256;
  o.n_threads = 2;
  o.ram_budget_bytes = 256ull << 20;
  o.spec = spec;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The MTP-head test model of `arch` with draft-mtp.
std::unique_ptr<Engine> MakeMtpCacheEngine(const std::string* cache_dir,
                                           const std::string& arch = "qwen35") {
  SpecOptions s;
  s.types = {SpecType::kDraftMtp};
  s.draft_n_max = 4;
  return MakeSpecCacheEngine(MtpModelPath(arch), s, cache_dir);
}

CompletionRequest TokenRequest(std::vector<Token> tokens, int max_tokens) {
  CompletionRequest r;
  r.prompt.tokens = std::move(tokens);
  r.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.top_logprobs = 2;
  return r;
}

// A head that predicts its trunk (TestModelSpec::predictable): drafts are accepted, several
// tokens a step, and the output is still the model's without speculation (token for token up
// to a near-tie: a draft is verified in a call of several rows), with one slot and with two
// decoding together; the counters say how many were taken.
TEST(SpeculationTest, MtpHeadWhoseDraftsAreAcceptedKeepsTheOutput) {
  for (const std::string arch : {"qwen35", "qwen3next"}) {
    SCOPED_TRACE(arch);
    const std::string path = ModelPath(arch) + ".predictable.gguf";
    TestModelSpec spec{arch, "tiny", 7};
    spec.nextn_layers = 1;
    spec.predictable = true;
    ASSERT_TRUE(MakeTestModel(spec, path).ok());
    SpecOptions mtp;
    mtp.types = {SpecType::kDraftMtp};
    mtp.draft_n_max = 4;
    auto plain = MakeSpecCacheEngine(path, SpecOptions{}, nullptr);
    auto fast = MakeSpecCacheEngine(path, mtp, nullptr, 2);
    ASSERT_TRUE(plain && fast);
    const std::vector<Token> prompts[2] = {ByteTokens(300, 41), ByteTokens(200, 42)};
    std::vector<std::shared_ptr<Completion>> runs;
    for (const auto& p : prompts) {
      auto c = fast->Start(TokenRequest(p, 96));
      ASSERT_TRUE(c.ok());
      runs.push_back(*c);
    }
    for (int i = 0; i < 2; ++i) {
      auto got = Drain(*runs[size_t(i)]);
      auto alone = fast->Complete(TokenRequest(prompts[i], 96));
      auto want = plain->Complete(TokenRequest(prompts[i], 96));
      ASSERT_TRUE(got.ok() && alone.ok() && want.ok());
      EXPECT_TRUE(SameUpToNearTie(*got, *want)) << "slot " << i;
      EXPECT_TRUE(SameUpToNearTie(*alone, *want));
      const Usage& u = alone->usage;
      std::printf("[ spec ] %s predictable head: %d drafted, %d taken, %d steps for %zu tokens\n",
                  arch.c_str(), u.draft_tokens, u.draft_accepted, u.draft_steps,
                  alone->tokens.size());
      EXPECT_GE(u.draft_accepted * 10, u.draft_tokens * 9) << "fewer than 90% taken";
      EXPECT_LT(u.draft_steps * 2, int(alone->tokens.size())) << "not several tokens a step";
    }
  }
}

// A prompt of 512 tokens served with the head's records going to a disk tier in a fresh folder,
// then the server stopped (its end writes what it queued). Returns the folder and that prompt
// with `more` tokens after it.
struct Served {
  std::string dir;
  std::vector<Token> next;
};
// `make` makes the server (its cache dir given); `check` looks at it after the prompt.
using EngineMaker = std::function<std::unique_ptr<Engine>(const std::string* cache_dir)>;
using ServedCheck = std::function<void(Engine& e, const CompletionResult& r)>;

Served ServeAndStop(const std::string& name, uint32_t seed, size_t more, const EngineMaker& make,
                    const ServedCheck& check, size_t first_len = 512) {
  Served s;
  s.dir = testing::RemoveAtExit(
      (std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))).string());
  const std::vector<Token> first = ByteTokens(first_len, seed);
  auto a = make(&s.dir);
  EXPECT_TRUE(a);
  if (!a) return s;
  auto r = a->Complete(TokenRequest(first, 8));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) check(*a, *r);
  s.next = first;
  const std::vector<Token> tail = ByteTokens(more, seed + 1);
  s.next.insert(s.next.end(), tail.begin(), tail.end());
  return s;
}

// With the MTP head: nothing of the head restored on the first prompt.
Served ServeAndStop(const std::string& name, uint32_t seed, size_t more) {
  auto make = [](const std::string* dir) { return MakeMtpCacheEngine(dir); };
  return ServeAndStop(name, seed, more, make, [](Engine&, const CompletionResult& r) {
    EXPECT_EQ(r.usage.mtp_restored_tokens, 0);
  });
}

// The MTP head's history is part of a cached prefix (MtpSidecar): a prompt of 512 tokens, then
// a restart on the same cache dir, then that prompt with 100 more. The second restores 512
// tokens from disk with the head's history beside them (counted: the head never reads them
// again), and drafts exactly what a server that prefilled the whole prompt cold drafts (the
// digest of every drafted token), with the same output. 512 ends a prefill call of both
// prompts (256-token calls), so the cold run computes every row as the first prompt did.
TEST(SpeculationTest, MtpHeadHistoryIsRestoredWithTheCachedPrefix) {
  const auto [dir, second] = ServeAndStop("prefixd-mtp-cache-", 11, 100);
  auto b = MakeMtpCacheEngine(&dir);
  auto cold = MakeMtpCacheEngine(nullptr);
  ASSERT_TRUE(b && cold);
  auto warm = b->Complete(TokenRequest(second, 48));
  auto want = cold->Complete(TokenRequest(second, 48));
  ASSERT_TRUE(warm.ok() && want.ok());
  std::printf("[ spec ] mtp head history: cached %d (tier %s), head restored %d, drafted %d / %d\n",
              warm->usage.cached_tokens, cache::TierName(warm->cache.tier),
              warm->usage.mtp_restored_tokens, warm->usage.draft_tokens, want->usage.draft_tokens);
  EXPECT_EQ(warm->usage.cached_tokens, 512);
  EXPECT_EQ(warm->cache.tier, CacheTier::kDisk);
  EXPECT_EQ(warm->usage.mtp_restored_tokens, 512);
  EXPECT_EQ(want->usage.mtp_restored_tokens, 0);
  EXPECT_TRUE(SameUpToNearTie(*warm, *want));
  ASSERT_GT(want->usage.draft_tokens, 0);
  EXPECT_EQ(warm->usage.draft_digest, want->usage.draft_digest)
      << "the restored head drafts otherwise than one that read the whole prompt";
  // The same prompt again on the warm server: the slot keeps its sequence, and the head's.
  auto again = b->Complete(TokenRequest(second, 48));
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->usage.cached_tokens, 0);
  EXPECT_EQ(again->usage.mtp_restored_tokens, again->usage.cached_tokens);
}

// The cache listing of `e` (one prompt domain) marks the trees of `role` as companions that
// follow that domain: no tree of theirs shows as a prompt's.
void ExpectCompanionsListed(const Engine& e, PrefixRole role) {
  std::set<std::string> prompt_domains, followed;
  for (const CachedPrefix& p : e.ListCachedPrefixes(nullptr)) {
    if (p.role == PrefixRole::kPrompt) prompt_domains.insert(p.domain);
    if (p.role == role) followed.insert(p.of_domain);
  }
  EXPECT_EQ(prompt_domains.size(), 1u);
  EXPECT_EQ(followed, prompt_domains) << PrefixRoleName(role);
}

// Every arch whose test model takes an MTP head: greedy output with draft-mtp equals the
// output without it, and the head's history comes back with a cached prefix after a restart,
// drafting as a server that prefilled the prompt cold. On the pure-attention targets (MLA:
// deepseek2; MLA with DSA's index cache: glm-dsa) the cache keeps no Snapshots, a restore may end
// inside a Block, and the carry there comes from the rows' own: the first prompt of 600 tokens
// ends inside the third 256-token Block, and the restore ends there too.
class MtpArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpArchTest, GreedyOutputIsUnchangedAndTheHeadsHistoryIsCached) {
  const std::string arch = GetParam();
  const bool pure_attention = arch == "deepseek2" || arch == "glm-dsa";
  auto make = [&arch](const std::string* dir) { return MakeMtpCacheEngine(dir, arch); };
  const size_t first_len = pure_attention ? 600 : 512;
  const auto [dir, second] = ServeAndStop(
      "prefixd-mtp-" + arch + "-", 31, 100, make,
      [](Engine&, const CompletionResult& r) { EXPECT_EQ(r.usage.mtp_restored_tokens, 0); },
      first_len);
  auto b = make(&dir);
  auto cold = make(nullptr);
  auto plain = MakeSpecCacheEngine(MtpModelPath(arch), SpecOptions{}, nullptr);
  ASSERT_TRUE(b && cold && plain);
  auto warm = b->Complete(TokenRequest(second, 48));
  auto want = cold->Complete(TokenRequest(second, 48));
  auto base = plain->Complete(TokenRequest(second, 48));
  ASSERT_TRUE(warm.ok() && want.ok() && base.ok()) << warm.status().ToString();
  std::printf("[ spec ] %s mtp head history: cached %d (tier %s), head restored %d, drafted %d "
              "(%d taken) / %d\n",
              arch.c_str(), warm->usage.cached_tokens, cache::TierName(warm->cache.tier),
              warm->usage.mtp_restored_tokens, warm->usage.draft_tokens,
              warm->usage.draft_accepted, want->usage.draft_tokens);
  EXPECT_TRUE(SameUpToNearTie(*want, *base)) << "draft-mtp changed the output";
  EXPECT_TRUE(SameUpToNearTie(*warm, *want));
  EXPECT_EQ(warm->cache.tier, CacheTier::kDisk);
  if (pure_attention) {
    EXPECT_GT(warm->usage.cached_tokens, 512);
    EXPECT_NE(warm->usage.cached_tokens % 256, 0) << "the restore was meant to end inside a Block";
  } else {
    EXPECT_EQ(warm->usage.cached_tokens, 512);
  }
  EXPECT_EQ(warm->usage.mtp_restored_tokens, warm->usage.cached_tokens);
  ExpectCompanionsListed(*b, PrefixRole::kMtpHead);
  ASSERT_GT(want->usage.draft_tokens, 0);
  EXPECT_EQ(warm->usage.draft_digest, want->usage.draft_digest)
      << "the restored head drafts otherwise than one that read the whole prompt";
}

INSTANTIATE_TEST_SUITE_P(NextnArchs, MtpArchTest,
                         ::testing::Values("qwen3next", "qwen35moe", "deepseek2", "glm-dsa"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Flips a payload byte of every disk record of kind `ext` (".snap", ".rows") whose domain
// `is_sidecar` picks, given the domains of the directory's records (docs/disk-format.md: the
// header's length at 8, the domain at 12 + 64, the payload at 24 + H). Returns how many.
int CorruptSidecarRecords(const std::string& dir, const std::string& ext,
                          const std::function<bool(const Digest& d, const std::set<Digest>& all)>& is_sidecar) {
  std::map<std::filesystem::path, Digest> domain_of;
  std::set<Digest> domains;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/records")) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::vector<char> head(12 + 96);
    if (!f.read(head.data(), std::streamsize(head.size()))) continue;
    Digest d;
    std::memcpy(d.data(), head.data() + 12 + 64, d.size());
    domains.insert(d);
    if (e.path().extension() == ext) domain_of[e.path()] = d;
  }
  int corrupted = 0;
  for (const auto& entry : domain_of) {
    if (!is_sidecar(entry.second, domains)) continue;
    std::fstream f(entry.first, std::ios::binary | std::ios::in | std::ios::out);
    uint32_t h = 0;
    f.seekg(8);
    f.read(reinterpret_cast<char*>(&h), 4);
    const std::streamoff at = std::streamoff(24 + h + 12);  // inside the payload
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(at);
    f.write(&c, 1);
    corrupted += f.good() ? 1 : 0;
  }
  return corrupted;
}

// Whether `d` is the MTP head's domain of one of `all`.
bool IsMtpHeadDomain(const Digest& d, const std::set<Digest>& all) {
  return std::any_of(all.begin(), all.end(),
                     [&](const Digest& x) { return MtpSidecar::DomainOf(x) == d; });
}

// The MTP head's Snapshots (its carries): the records of domain DomainOf(X) where X is a domain
// of the directory too.
int CorruptMtpCarries(const std::string& dir) {
  return CorruptSidecarRecords(dir, ".snap", IsMtpHeadDomain);
}

// A server over `dir` (from `make`) answers `second`: it restores more than 512 tokens of the
// target's prefix and none of the head's history (a clean miss: the head starts empty at the
// restored position), and answers as a cold run.
void ExpectHeadHistoryMissed(const EngineMaker& make, const std::string& dir,
                             const std::vector<Token>& second) {
  auto b = make(&dir);
  auto cold = make(nullptr);
  ASSERT_TRUE(b && cold);
  auto warm = b->Complete(TokenRequest(second, 32));
  auto want = cold->Complete(TokenRequest(second, 32));
  ASSERT_TRUE(warm.ok() && want.ok()) << warm.status().ToString();
  EXPECT_GE(warm->usage.cached_tokens, 512);
  EXPECT_EQ(warm->usage.mtp_restored_tokens, 0);
  EXPECT_TRUE(SameUpToNearTie(*warm, *want));
}

// Faults: the head's records on disk fail their checksums. The next request restores the
// target's prefix as before and the head's not at all (a clean miss: the head starts empty at
// the restored position), and answers as a cold run.
TEST(SpeculationTest, MtpHeadHistoryThatFailsItsChecksumIsAMiss) {
  const auto [dir, second] = ServeAndStop("prefixd-mtp-fault-", 21, 60);
  ASSERT_GT(CorruptMtpCarries(dir), 0) << "no MTP head Snapshot on disk";
  ExpectHeadHistoryMissed([](const std::string* d) { return MakeMtpCacheEngine(d); }, dir, second);
}

// The same on a pure-attention target (deepseek2), whose head history is rows with their carries
// beside them: every head record on disk (Block rows and Tails) fails its checksum, and the
// restore of the target's 600 tokens comes back with none of the head's.
TEST(SpeculationTest, PureAttentionHeadHistoryThatFailsItsChecksumIsAMiss) {
  auto make = [](const std::string* dir) { return MakeMtpCacheEngine(dir, "deepseek2"); };
  const auto [dir, second] = ServeAndStop(
      "prefixd-mtp-mla-fault-", 23, 60, make, [](Engine&, const CompletionResult&) {}, 600);
  ASSERT_GT(CorruptSidecarRecords(dir, ".rows", IsMtpHeadDomain), 0) << "no MTP head rows on disk";
  CorruptSidecarRecords(dir, ".tail", IsMtpHeadDomain);
  ExpectHeadHistoryMissed(make, dir, second);
}

// llama's test model drafting (--model-draft) for `target`'s.
std::unique_ptr<Engine> MakeDraftCacheEngine(const std::string* cache_dir,
                                             const std::string& target = "llama") {
  SpecOptions s;
  s.types = {SpecType::kDraft};
  s.draft_model_path = ModelPath("llama");
  s.draft_n_max = 4;
  return MakeSpecCacheEngine(ModelPath(target), s, cache_dir);
}

// A 512-token prompt served with a draft model into a fresh cache folder, the server stopped.
// Returns the folder and that prompt with `more` tokens after it.
Served ServeWithDraftAndStop(const std::string& name, uint32_t seed, size_t more,
                             const std::string& target = "llama") {
  auto make = [&target](const std::string* dir) { return MakeDraftCacheEngine(dir, target); };
  return ServeAndStop(name + target, seed, more, make, [](Engine& e, const CompletionResult&) {
    const EngineStats st = e.GetStats();
    EXPECT_GE(st.draft_prefill_tokens, 512u) << "the draft model did not read the prompt";
    EXPECT_EQ(st.draft_restored_tokens, 0u);
  });
}

// The draft model's history is part of a cached prefix (DraftHistory): a prompt of 512 tokens,
// a restart on the same cache dir, then that prompt with 100 more. The draft's sequence gets
// its first 512 tokens from the disk tier (counted: the draft model decodes only the rest), and
// drafts exactly what a server without the cache drafts (the digest of every drafted token),
// with the same output. On llama (rows alone restore a prefix) and qwen35 (a hybrid: the
// cache needs a Snapshot at every restore point, so the draft's history carries a marker).
class DraftHistoryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DraftHistoryTest, IsRestoredWithTheCachedPrefix) {
  const auto [dir, second] = ServeWithDraftAndStop("prefixd-draft-cache-", 31, 100, GetParam());
  auto b = MakeDraftCacheEngine(&dir, GetParam());
  auto cold = MakeDraftCacheEngine(nullptr, GetParam());
  ASSERT_TRUE(b && cold);
  auto warm = b->Complete(TokenRequest(second, 48));
  auto want = cold->Complete(TokenRequest(second, 48));
  ASSERT_TRUE(warm.ok() && want.ok());
  const EngineStats ws = b->GetStats(), cs = cold->GetStats();
  std::printf("[ spec ] draft model history: cached %d, draft restored %llu, draft prefilled %llu "
              "(cold %llu), drafted %d / %d\n",
              warm->usage.cached_tokens, (unsigned long long)ws.draft_restored_tokens,
              (unsigned long long)ws.draft_prefill_tokens,
              (unsigned long long)cs.draft_prefill_tokens, warm->usage.draft_tokens,
              want->usage.draft_tokens);
  EXPECT_EQ(warm->usage.cached_tokens, 512);
  EXPECT_EQ(ws.draft_restored_tokens, 512u);
  EXPECT_LE(ws.draft_prefill_tokens, second.size() - 512 + 48);
  EXPECT_GE(cs.draft_prefill_tokens, second.size());
  EXPECT_EQ(cs.draft_restored_tokens, 0u);
  EXPECT_TRUE(SameUpToNearTie(*warm, *want));
  ExpectCompanionsListed(*b, PrefixRole::kDraftModel);
  ASSERT_GT(want->usage.draft_tokens, 0);
  EXPECT_EQ(warm->usage.draft_digest, want->usage.draft_digest)
      << "the restored draft model drafts otherwise than one that read the whole prompt";
}

INSTANTIATE_TEST_SUITE_P(Targets, DraftHistoryTest, ::testing::Values("llama", "qwen35"));

// Faults: the draft's rows on disk fail their checksums. The next request restores the
// target's prefix as before and the draft's history not at all: the draft model decodes the
// whole history, and the answer is a cold run's.
TEST(SpeculationTest, DraftModelHistoryThatFailsItsChecksumIsAMiss) {
  const auto [dir, second] = ServeWithDraftAndStop("prefixd-draft-fault-", 41, 60);
  std::set<Digest> targets;  // the target's domains: the ones the cache dir remembers
  for (const cache::DomainInfo& d : cache::ListDomains(dir)) targets.insert(d.domain);
  ASSERT_FALSE(targets.empty());
  const int corrupted = CorruptSidecarRecords(
      dir, ".rows", [&](const Digest& d, const std::set<Digest>&) { return !targets.count(d); });
  ASSERT_GT(corrupted, 0) << "no draft model rows on disk";
  auto b = MakeDraftCacheEngine(&dir);
  auto cold = MakeDraftCacheEngine(nullptr);
  ASSERT_TRUE(b && cold);
  auto warm = b->Complete(TokenRequest(second, 32));
  auto want = cold->Complete(TokenRequest(second, 32));
  ASSERT_TRUE(warm.ok() && want.ok()) << warm.status().ToString();
  EXPECT_GE(warm->usage.cached_tokens, 256);  // the target's own records are untouched
  EXPECT_EQ(b->GetStats().draft_restored_tokens, 0u);
  EXPECT_GE(b->GetStats().draft_prefill_tokens, second.size());
  EXPECT_TRUE(SameUpToNearTie(*warm, *want));
  EXPECT_EQ(warm->usage.draft_digest, want->usage.draft_digest);
}

// A model without NextN layers cannot serve draft-mtp: the engine does not start, and says why.
TEST(SpeculationTest, MtpNeedsAModelWithAnMtpHead) {
  EngineOptions o;
  o.model_path = ModelPath("qwen35");
  o.cache_enabled = false;
  o.n_ctx_per_slot = 512;
  o.spec.types = {SpecType::kDraftMtp};
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kNotSupported);
  EXPECT_NE(e.status().message().find("nextn"), std::string::npos) << e.status().ToString();
  o.spec.types = {SpecType::kDraftMtp, SpecType::kNgramMod};
  o.model_path = MtpModelPath();
  EXPECT_EQ(Engine::Create(o).status().code(), Status::Code::kInvalidArgument);
}

// deepseek4's compressed cache cannot drop trailing positions, and its state is only read
// whole: no exact rollback, so no speculation (a log line says so), never a wrong token.
TEST(SpeculationTest, ModelsWithoutExactRollbackDoNotSpeculate) {
  auto e = MakeEngine("deepseek4", NgramMod());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->GetStats().speculation, "");
  auto r = e->Complete(Request(*e, 32));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->usage.draft_steps, 0);
}

}  // namespace
}  // namespace prefixd::engine
