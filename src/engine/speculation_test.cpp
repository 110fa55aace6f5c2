// Speculative decoding: the flags in llama-server's words, pools kept per cache domain, and
// greedy output with speculation equal to greedy output without it on every rollback kind.
// The cache suites with speculation on are EngineCacheTest's SpecArchs (engine_test.cpp).
#include "engine/speculation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "common.h"
#include "engine/engine.h"
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

std::string MtpModelPath() {
  static const std::string path = [] {
    const std::string p = ModelPath("qwen35") + ".mtp.gguf";
    TestModelSpec spec{"qwen35", "tiny", 7};
    spec.nextn_layers = 1;
    Status st = MakeTestModel(spec, p);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return p;
  }();
  return path;
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
