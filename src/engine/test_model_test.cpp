#include "engine/testgen/test_model.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chat.h"
#include "engine/chat/chat_output.h"
#include "engine/chat/chat_template.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/chat/pinned_assets.h"
#include "engine/testgen/test_model_internal.h"
#include "llama.h"

namespace prefixd::engine {
namespace {

namespace fs = std::filesystem;

const char kEnglish[] =
    "The quick brown fox jumps over the lazy dog. You are a helpful assistant: please "
    "answer the question about the weather in Paris, and think step by step. 12345 "
    "{\"name\": \"search\", \"arguments\": {\"query\": \"hello world\"}}\n  indented\ttab";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct ModelFree {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
struct ContextFree {
  void operator()(llama_context* c) const { llama_free(c); }
};

// One tiny model per arch, generated once for the whole binary.
class TestModels {
 public:
  static TestModels& Get() {
    if (instance_ == nullptr) instance_ = new TestModels();
    return *instance_;
  }
  // Frees the models and deletes the folder, if Get() ever made them.
  static void Destroy() {
    if (instance_ == nullptr) return;
    instance_->models_.clear();
    fs::remove_all(instance_->dir_);
    delete instance_;
    instance_ = nullptr;
  }
  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& arch) {
    auto it = paths_.find(arch);
    if (it != paths_.end()) return it->second;
    const std::string path = dir_ + "/" + arch + ".gguf";
    Status st = MakeTestModel({arch, "tiny", 1}, path);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return paths_[arch] = path;
  }
  llama_model* Model(const std::string& arch) {
    auto it = models_.find(arch);
    if (it != models_.end()) return it->second.get();
    llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 0;
    llama_model* m = llama_model_load_from_file(Path(arch).c_str(), params);
    models_[arch].reset(m);
    return m;
  }

 private:
  TestModels() {
    EnsureBackendInitialized();
    char tmpl[] = "/tmp/prefixd-test-models-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  static inline TestModels* instance_ = nullptr;
  std::string dir_;
  std::map<std::string, std::string> paths_;
  std::map<std::string, std::unique_ptr<llama_model, ModelFree>> models_;
};

class TestModelsCleanup : public ::testing::Environment {
 public:
  void TearDown() override { TestModels::Destroy(); }
};
::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new TestModelsCleanup());

std::vector<llama_token> Tokenize(const llama_vocab* vocab, const std::string& text,
                                  bool parse_special) {
  std::vector<llama_token> out(text.size() + 8);
  const int n = llama_tokenize(vocab, text.data(), int32_t(text.size()), out.data(),
                               int32_t(out.size()), /*add_special=*/true, parse_special);
  out.resize(n < 0 ? 0 : n);
  return out;
}

std::string Detokenize(const llama_vocab* vocab, const std::vector<llama_token>& tokens) {
  std::string out(tokens.size() * 32 + 16, '\0');
  const int n = llama_detokenize(vocab, tokens.data(), int32_t(tokens.size()), out.data(),
                                 int32_t(out.size()), /*remove_special=*/false,
                                 /*unparse_special=*/true);
  out.resize(n < 0 ? 0 : n);
  return out;
}

class TestModelArchTest : public ::testing::TestWithParam<std::string> {
 protected:
  llama_model* model() { return TestModels::Get().Model(GetParam()); }
  const llama_vocab* vocab() { return llama_model_get_vocab(model()); }
};

std::string MetaString(const llama_model* model, const char* key) {
  char buf[512];
  const int n = llama_model_meta_val_str(model, key, buf, sizeof(buf));
  return n < 0 ? std::string() : std::string(buf);
}

// What each arch's tiny model must be: the memory layout the cache sees, its sliding window,
// and an upper bound on its file size (llama.cpp's generator makes deepseek4 with n_embd 512).
struct Expected {
  MemoryLayout layout;
  int n_swa;
  size_t max_mib;
};
const std::map<std::string, Expected>& ExpectedModels() {
  using L = MemoryLayout;
  static const std::map<std::string, Expected> kExpected = {
      {"llama", {L::kAttention, 0, 16}},       {"qwen35", {L::kHybrid, 0, 16}},
      {"qwen3next", {L::kHybrid, 0, 16}},      {"nemotron_h", {L::kHybrid, 0, 16}},
      {"granitehybrid", {L::kHybrid, 0, 16}},  {"lfm2", {L::kHybrid, 0, 16}},
      {"mamba2", {L::kRecurrent, 0, 16}},      {"gemma3", {L::kIswa, 32, 16}},
      {"gpt-oss", {L::kIswa, 32, 16}},         {"gemma4", {L::kIswa, 32, 16}},
      {"qwen4exp", {L::kHybridIdx, 0, 24}},    {"deepseek4", {L::kDsv4, 0, 96}},
      {"deepseek2", {L::kAttention, 0, 8}},    {"glm-dsa", {L::kDsa, 0, 48}},
      {"qwen35moe", {L::kHybrid, 0, 16}},      {"nemotron_h_moe", {L::kHybrid, 0, 8}},
      {"kimi-linear", {L::kHybrid, 0, 8}},     {"jamba", {L::kHybrid, 0, 8}},
      {"falcon-h1", {L::kHybrid, 0, 16}},      {"minimax-m3", {L::kMsa, 0, 16}},
  };
  return kExpected;
}

TEST_P(TestModelArchTest, LoadsWithMetadata) {
  ASSERT_NE(model(), nullptr);
  EXPECT_EQ(MetaString(model(), "general.architecture"), GetParam());
  EXPECT_EQ(MetaString(model(), "general.name"), "prefixd-test-" + GetParam() + "-tiny");
  EXPECT_EQ(MetaString(model(), "tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(llama_model_n_ctx_train(model()), 65536);
  EXPECT_NE(llama_model_chat_template(model(), nullptr), nullptr);
  EXPECT_EQ(llama_vocab_n_tokens(vocab()), 640);
  EXPECT_GT(llama_model_size(model()), 0u);
  const auto it = ExpectedModels().find(GetParam());
  ASSERT_NE(it, ExpectedModels().end()) << "no expectations for " << GetParam();
  EXPECT_LT(fs::file_size(TestModels::Get().Path(GetParam())), it->second.max_mib << 20);
}

// Each arch has the kind of memory the cache must handle for it, as prefixd's Model sees it.
TEST_P(TestModelArchTest, HasTheMemoryLayoutOfItsFamily) {
  const auto it = ExpectedModels().find(GetParam());
  ASSERT_NE(it, ExpectedModels().end()) << "no expectations for " << GetParam();
  auto loaded = Model::Load({TestModels::Get().Path(GetParam())});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Model& m = *loaded.value();
  EXPECT_EQ(m.arch(), GetParam());
  EXPECT_EQ(m.layout(), it->second.layout) << MemoryLayoutName(m.layout());
  EXPECT_EQ(m.n_swa(), it->second.n_swa);
  EXPECT_EQ(m.n_vocab(), 640);
}

TEST_P(TestModelArchTest, TextRoundTripsAndCompresses) {
  ASSERT_NE(model(), nullptr);
  const std::vector<llama_token> tokens = Tokenize(vocab(), kEnglish, false);
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(Detokenize(vocab(), tokens), kEnglish);
  const double chars_per_token = double(sizeof(kEnglish) - 1) / double(tokens.size());
  EXPECT_GT(chars_per_token, 2.0) << tokens.size() << " tokens";
  RecordProperty("chars_per_token", std::to_string(chars_per_token));
  EXPECT_FALSE(llama_vocab_get_add_bos(vocab()));
}

TEST_P(TestModelArchTest, SpecialTokensAreSingleTokens) {
  ASSERT_NE(model(), nullptr);
  for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>",
                              "</think>", "<tool_call>", "</tool_call>"}) {
    const std::vector<llama_token> t = Tokenize(vocab(), special, true);
    ASSERT_EQ(t.size(), 1u) << special;
    EXPECT_EQ(Detokenize(vocab(), t), special);
  }
  const llama_token im_end = Tokenize(vocab(), "<|im_end|>", true)[0];
  EXPECT_EQ(llama_vocab_eos(vocab()), im_end);
  EXPECT_TRUE(llama_vocab_is_eog(vocab(), im_end));
  // Control tokens stay text without parse_special; <think> is user-defined and always one.
  EXPECT_GT(Tokenize(vocab(), "<|im_start|>", false).size(), 1u);
  EXPECT_EQ(Tokenize(vocab(), "<think>", false).size(), 1u);
}

TEST_P(TestModelArchTest, DecodeGivesFiniteVaryingLogits) {
  ASSERT_NE(model(), nullptr);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 64;
  cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 2;
  std::unique_ptr<llama_context, ContextFree> ctx(llama_init_from_model(model(), cp));
  ASSERT_NE(ctx, nullptr);
  std::string text;
  while (Tokenize(vocab(), text, false).size() < 64) text += kEnglish;
  std::vector<llama_token> tokens = Tokenize(vocab(), text, false);
  tokens.resize(64);
  llama_batch batch = llama_batch_get_one(tokens.data(), int32_t(tokens.size()));
  ASSERT_EQ(llama_decode(ctx.get(), batch), 0);
  const float* logits = llama_get_logits_ith(ctx.get(), -1);
  ASSERT_NE(logits, nullptr);
  const int n_vocab = llama_vocab_n_tokens(vocab());
  float lo = logits[0], hi = logits[0];
  for (int i = 0; i < n_vocab; ++i) {
    ASSERT_TRUE(std::isfinite(logits[i])) << "logit " << i;
    lo = std::min(lo, logits[i]);
    hi = std::max(hi, logits[i]);
  }
  EXPECT_GT(hi - lo, 0.1f);
}

// Greedy decoding of `n` tokens after a chat prompt, in a fresh context.
std::vector<llama_token> Greedy(llama_model* model, const std::vector<llama_token>& prompt,
                                int n) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 2;
  std::unique_ptr<llama_context, ContextFree> ctx(llama_init_from_model(model, cp));
  if (ctx == nullptr) return {};
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::vector<llama_token> next = prompt, out;
  for (int i = 0; i < n; ++i) {
    llama_batch batch = llama_batch_get_one(next.data(), int32_t(next.size()));
    if (llama_decode(ctx.get(), batch) != 0) return {};
    const float* logits = llama_get_logits_ith(ctx.get(), -1);
    const llama_token best = llama_token(std::max_element(logits, logits + n_vocab) - logits);
    out.push_back(best);
    next = {best};
  }
  return out;
}

// The chat prompt's special tokens are single tokens, and decoding after it is deterministic.
TEST_P(TestModelArchTest, ChatPromptGeneratesDeterministically) {
  ASSERT_NE(model(), nullptr);
  const std::string prompt =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\n";
  const std::vector<llama_token> tokens = Tokenize(vocab(), prompt, true);
  const std::vector<llama_token> im_start = Tokenize(vocab(), "<|im_start|>", true);
  ASSERT_EQ(im_start.size(), 1u);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), im_start[0]), 3);
  EXPECT_EQ(Detokenize(vocab(), tokens), prompt);
  const std::vector<llama_token> a = Greedy(model(), tokens, 8);
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(Greedy(model(), tokens, 8), a);
}

TEST_P(TestModelArchTest, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::string& dir = TestModels::Get().dir();
  const std::string a = TestModels::Get().Path(GetParam());
  const std::string b = dir + "/" + GetParam() + "-again.gguf";
  const std::string c = dir + "/" + GetParam() + "-seed2.gguf";
  ASSERT_TRUE(MakeTestModel({GetParam(), "tiny", 1}, b).ok());
  ASSERT_TRUE(MakeTestModel({GetParam(), "tiny", 2}, c).ok());
  const std::string bytes_a = ReadFile(a);
  EXPECT_TRUE(bytes_a == ReadFile(b));
  const std::string bytes_c = ReadFile(c);
  EXPECT_EQ(bytes_a.size(), bytes_c.size());
  EXPECT_FALSE(bytes_a == bytes_c);
  fs::remove(b);
  fs::remove(c);
}

std::vector<std::string> AllArchs() {
  std::vector<std::string> archs = TestModelArchs();
  archs.insert(archs.end(), ExtraTestModelArchs().begin(), ExtraTestModelArchs().end());
  return archs;
}

INSTANTIATE_TEST_SUITE_P(AllArchs, TestModelArchTest, ::testing::ValuesIn(AllArchs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(TestModelTest, RejectsUnknownArchAndShapeNamingValidOnes) {
  const std::string out = TestModels::Get().dir() + "/bad.gguf";
  Status st = MakeTestModel({"gpt2000", "tiny", 1}, out);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("qwen35"), std::string::npos) << st.message();
  st = MakeTestModel({"llama", "huge", 1}, out);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("medium"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(out));
}

// A GGUF file's metadata and tensors with their data.
struct GgufFile {
  explicit GgufFile(const std::string& path) {
    gguf_init_params params = {/*no_alloc=*/false, /*ctx=*/&data};
    ctx = gguf_init_from_file(path.c_str(), params);
  }
  ~GgufFile() {
    if (ctx != nullptr) gguf_free(ctx);
    if (data != nullptr) ggml_free(data);
  }
  std::string U64s(const std::string& key) const {
    const int64_t id = gguf_find_key(ctx, key.c_str());
    if (id < 0) return "";
    std::string out;
    const auto* v = static_cast<const uint64_t*>(gguf_get_arr_data(ctx, id));
    for (size_t i = 0; i < gguf_get_arr_n(ctx, id); ++i) out += std::to_string(v[i]) + " ";
    return out;
  }
  gguf_context* ctx = nullptr;
  ggml_context* data = nullptr;
};

// Bytes of sequence 0's state after decoding the first `n` tokens of `tokens`.
size_t StateSizeAfter(llama_model* model, std::vector<llama_token> tokens, size_t n) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 2;
  std::unique_ptr<llama_context, ContextFree> ctx(llama_init_from_model(model, cp));
  tokens.resize(n);
  if (ctx == nullptr || llama_decode(ctx.get(), llama_batch_get_one(tokens.data(),
                                                                      int32_t(n))) != 0) {
    return 0;
  }
  return llama_state_seq_get_size(ctx.get(), 0);
}

// gemma4's last 4 of 8 layers share the KV of layers 2 (SWA) and 3 (global): a token adds K
// and V rows (F16) for 3 SWA layers of 2 heads x 16 and 1 global layer of 2 heads x 32 only
// (3 x 128 + 256 = 640 bytes, plus cell bookkeeping), not for 8 layers (1280 bytes).
TEST(TestModelTest, Gemma4SharesTheKvOfItsLastLayers) {
  llama_model* model = TestModels::Get().Model("gemma4");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(MetaString(model, "gemma4.attention.shared_kv_layers"), "4");
  EXPECT_EQ(MetaString(model, "gemma4.embedding_length_per_layer_input"), "16");
  EXPECT_EQ(llama_model_n_layer(model), 8);
  const GgufFile file(TestModels::Get().Path("gemma4"));
  ASSERT_NE(file.ctx, nullptr);
  EXPECT_GE(gguf_find_tensor(file.ctx, "per_layer_model_proj.weight"), 0);
  EXPECT_GE(gguf_find_tensor(file.ctx, "per_layer_token_embd.weight"), 0);
  std::string text;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  while (Tokenize(vocab, text, false).size() < 24) text += kEnglish;
  const std::vector<llama_token> tokens = Tokenize(vocab, text, false);
  const size_t per_token =
      (StateSizeAfter(model, tokens, 24) - StateSizeAfter(model, tokens, 8)) / 16;
  RecordProperty("state_bytes_per_token", std::to_string(per_token));
  EXPECT_GE(per_token, 640u);
  EXPECT_LT(per_token, 800u);
}

// qwen35 with --nextn 1: one MTP block after the trunk, loaded by llama.cpp's MTP context. The
// trunk's weights are the plain model's (drawn by name), so its greedy output is too.
TEST(TestModelTest, NextnLayerGivesQwen35AnMtpHead) {
  const std::string path = TestModels::Get().dir() + "/qwen35-mtp.gguf";
  TestModelSpec spec{"qwen35", "tiny", 1};
  spec.nextn_layers = 1;
  ASSERT_TRUE(MakeTestModel(spec, path).ok());
  const GgufFile file(path);
  ASSERT_NE(file.ctx, nullptr);
  EXPECT_GE(gguf_find_tensor(file.ctx, "blk.4.nextn.eh_proj.weight"), 0);
  EXPECT_GE(gguf_find_tensor(file.ctx, "blk.4.nextn.enorm.weight"), 0);
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  params.load_mtp = true;
  std::unique_ptr<llama_model, ModelFree> model(llama_model_load_from_file(path.c_str(), params));
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(llama_model_n_layer_nextn(model.get()), 1);
  EXPECT_EQ(llama_model_n_layer(model.get()), 4);  // the trunk
  EXPECT_EQ(MetaString(model.get(), "general.name"), "prefixd-test-qwen35-tiny-mtp");
  params.load_mtp = false;  // a server that does not speculate loads the trunk alone
  std::unique_ptr<llama_model, ModelFree> trunk(llama_model_load_from_file(path.c_str(), params));
  ASSERT_NE(trunk, nullptr);

  const std::string prompt =
      "<|im_start|>user\nHi there, what is new?<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<llama_token> tokens =
      Tokenize(llama_model_get_vocab(model.get()), prompt, true);
  const std::vector<llama_token> plain = Greedy(TestModels::Get().Model("qwen35"), tokens, 12);
  EXPECT_EQ(Greedy(model.get(), tokens, 12), plain);
  EXPECT_EQ(Greedy(trunk.get(), tokens, 12), plain);

  // The MTP head decodes (token, hidden state) pairs in a context of its own.
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
  std::unique_ptr<llama_context, ContextFree> mtp(llama_init_from_model(model.get(), cp));
  ASSERT_NE(mtp, nullptr);
  const int n_embd = llama_model_n_embd(model.get());
  llama_batch batch = llama_batch_init(8, n_embd, 1);
  std::vector<llama_token> ids(8);
  batch.token = ids.data();  // llama_batch_init gives one of token / embd; MTP reads both
  for (int i = 0; i < 8; ++i) {
    ids[size_t(i)] = tokens[size_t(i)];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = i == 7;
    for (int e = 0; e < n_embd; ++e) batch.embd[size_t(i) * n_embd + e] = 0.01f * float(e % 7);
  }
  batch.n_tokens = 8;
  EXPECT_EQ(llama_decode(mtp.get(), batch), 0);
  const float* logits = llama_get_logits_ith(mtp.get(), -1);
  ASSERT_NE(logits, nullptr);
  EXPECT_TRUE(std::isfinite(logits[0]));
  batch.token = nullptr;
  llama_batch_free(batch);

  TestModelSpec llama{"llama", "tiny", 1};
  llama.nextn_layers = 1;
  EXPECT_EQ(MakeTestModel(llama, path + ".x").code(), Status::Code::kInvalidArgument);
  spec.nextn_layers = 2;
  EXPECT_EQ(MakeTestModel(spec, path + ".x").code(), Status::Code::kInvalidArgument);
  TestModelSpec upstream{"jamba", "tiny", 1};  // llama.cpp has no MTP graph for it
  upstream.nextn_layers = 1;
  EXPECT_EQ(MakeTestModel(upstream, path + ".x").code(), Status::Code::kInvalidArgument);
}

// The other archs that take an MTP head, prefixd's own (qwen3next) and llama.cpp generator's
// (qwen35moe, deepseek2, glm-dsa): the file has one NextN block after the trunk, the head
// loads, and the trunk loaded alone answers as the plain model of the same seed.
class NextnArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(NextnArchTest, TheTrunkIsThePlainModelAndTheHeadLoads) {
  const std::string arch = GetParam();
  const std::string dir = TestModels::Get().dir() + "/nextn-" + arch;
  const std::string plain_path = dir + ".gguf", mtp_path = dir + "-mtp.gguf";
  TestModelSpec spec{arch, "tiny", 3};
  ASSERT_TRUE(MakeTestModel(spec, plain_path).ok());
  spec.nextn_layers = 1;
  Status st = MakeTestModel(spec, mtp_path);
  ASSERT_TRUE(st.ok()) << st.ToString();
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  using ModelPtr = std::unique_ptr<llama_model, ModelFree>;
  ModelPtr plain(llama_model_load_from_file(plain_path.c_str(), params));
  ModelPtr trunk(llama_model_load_from_file(mtp_path.c_str(), params));
  params.load_mtp = true;
  ModelPtr full(llama_model_load_from_file(mtp_path.c_str(), params));
  ASSERT_TRUE(plain && trunk && full);
  EXPECT_EQ(llama_model_n_layer_nextn(full.get()), 1);
  EXPECT_EQ(llama_model_n_layer(full.get()), llama_model_n_layer(plain.get()));
  EXPECT_NE(MetaString(full.get(), "general.name").find("-mtp"), std::string::npos);
  const std::vector<llama_token> tokens =
      Tokenize(llama_model_get_vocab(plain.get()), "Hi there, what is new today?", true);
  const std::vector<llama_token> want = Greedy(plain.get(), tokens, 12);
  EXPECT_EQ(Greedy(trunk.get(), tokens, 12), want);
  EXPECT_EQ(Greedy(full.get(), tokens, 12), want);
}

INSTANTIATE_TEST_SUITE_P(Archs, NextnArchTest,
                         ::testing::Values("qwen3next", "qwen35moe", "deepseek2", "glm-dsa"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A scripted model answers any prompt with its script, then the end of the turn, by greedy
// decoding and with a margin wide enough for sampling; a script whose table would be ambiguous
// is refused, and so are archs without the predictable trunk.
TEST(TestModelTest, AScriptedModelAnswersItsScriptThenEndsTheTurn) {
  const std::string path = TestModels::Get().dir() + "/qwen35-script.gguf";
  TestModelSpec spec{"qwen35", "tiny", 1};
  spec.script.parts = {"Summary: the files were read."};
  ASSERT_TRUE(MakeTestModel(spec, path).ok());
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  std::unique_ptr<llama_model, ModelFree> model(llama_model_load_from_file(path.c_str(), params));
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  std::vector<llama_token> want = Tokenize(vocab, spec.script.parts[0], false);
  llama_token end = llama_vocab_eot(vocab);
  if (end == LLAMA_TOKEN_NULL) end = llama_vocab_eos(vocab);
  want.push_back(end);
  for (const char* prompt : {"<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
                             "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nList "
                             "the files.<|im_end|>\n<|im_start|>assistant\n"}) {
    EXPECT_EQ(Greedy(model.get(), Tokenize(vocab, prompt, true), int(want.size())), want) << prompt;
  }
  spec.script.parts = {"x x x"};  // " x" twice: what follows it would be ambiguous
  const Status twice = MakeTestModel(spec, path + ".bad");
  EXPECT_EQ(twice.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(twice.message().find("comes twice"), std::string::npos) << twice.message();
  TestModelSpec other{"llama", "tiny", 1};
  other.script.parts = {"Hi."};
  EXPECT_EQ(MakeTestModel(other, path + ".bad").code(), Status::Code::kInvalidArgument);
}

// Qwen3.5's XML tool call, scripted: ">\n", "<", "</", ... come more than once, each ranking
// its followers so that the server's lazy tool-call grammar (from "<tool_call>" on) rules out
// the preferred one wherever the text goes on otherwise. ">\n" also ends the prompt with
// thinking on, so it ranks the script's first token first; the newline before the free value
// is ">" then "\n", whose only follower is the value (docs/test-models.md).
TestScript ReadFileCall() {
  TestScript s;
  s.parts = {"Done", "<", "tool", "_call", ">\n", "<", "function", "=", "read", "_file", ">\n",
             "<", "parameter", "=", "path", ">", "\n", "/repo/add.py~\n", "</", "parameter",
             ">\n", "</", "function", ">\n", "</", "t", "ool", "_", "call", ">"};
  s.ranks = {{">\n", {"Done", "</", "<"}},
             {">", {"", "\n"}},
             {"<", {"tool", "function", "parameter"}},
             {"</", {"parameter", "function", "t"}},
             {"parameter", {">\n", "="}},
             {"function", {"=", ">\n"}},
             {"=", {"read", "path"}}};
  return s;
}

const char kFileTools[] = R"([
  {"type":"function","function":{"name":"read_file","parameters":{"type":"object",
   "properties":{"path":{"type":"string"},"offset":{"type":"integer"}},"required":["path"]}}},
  {"type":"function","function":{"name":"write_file","parameters":{"type":"object",
   "properties":{"path":{"type":"string"},"text":{"type":"string"}},"required":["path","text"]}}}])";

// Under the tools' grammar the model writes the call whole, greedily and at temperature 1,
// with thinking on and off, and the reply parses into it; without its ranks the script is
// refused, and so is a rank that leaves a follower out.
TEST(TestModelTest, AScriptWithRankedFollowersWritesAToolCallUnderItsGrammar) {
  const std::string path = TestModels::Get().dir() + "/qwen35-tool-call.gguf";
  TestModelSpec spec{"qwen35", "tiny", 1};
  spec.vocab = "qwen35";
  spec.chat_template = "Qwen3.5-4B";
  spec.script = ReadFileCall();
  const Status made = MakeTestModel(spec, path);
  ASSERT_TRUE(made.ok()) << made.ToString();
  EngineOptions o;
  o.model_path = path;
  o.n_ctx_per_slot = 1024;
  o.n_batch = o.n_ubatch = 256;
  o.n_threads = 1;
  o.ram_budget_bytes = 64ull << 20;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::string want;
  for (const std::string& part : spec.script.parts) want += part;
  for (const bool thinking : {true, false}) {
    for (const double temperature : {0.0, 1.0}) {
      ChatRenderOptions ro;
      ro.tools_json = kFileTools;
      ro.enable_thinking = thinking;
      auto p = (*engine)->PrepareChat(R"([{"role":"user","content":"Read add.py~"}])", ro);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      CompletionRequest r;
      r.prompt = *p;
      r.max_tokens = 64;
      r.sampling.temperature = temperature;
      r.sampling.seed = 7;
      r.sampling.grammar = p->output.grammar;
      auto done = (*engine)->Complete(std::move(r));
      ASSERT_TRUE(done.ok()) << done.status().ToString();
      EXPECT_EQ(done->text, want) << "thinking " << thinking << ", temperature " << temperature;
      const ChatMessage m = ParseChatOutput(p->output, done->text);
      ASSERT_EQ(m.tool_calls.size(), 1u) << done->text;
      EXPECT_EQ(m.tool_calls[0].name, "read_file");
      EXPECT_EQ(m.tool_calls[0].arguments, R"({"path":"/repo/add.py~"})");
    }
  }
  spec.script.ranks.clear();
  const Status unranked = MakeTestModel(spec, path + ".bad");
  EXPECT_EQ(unranked.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(unranked.message().find("comes twice"), std::string::npos) << unranked.message();
  spec.script = ReadFileCall();
  spec.script.ranks[">"] = {""};
  const Status short_rank = MakeTestModel(spec, path + ".bad");
  EXPECT_EQ(short_rank.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(short_rank.message().find("leaves out"), std::string::npos) << short_rank.message();
  spec.script = ReadFileCall();
  spec.script.ranks["Hello"] = {"world"};
  const Status stray = MakeTestModel(spec, path + ".bad");
  EXPECT_EQ(stray.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(stray.message().find("does not hold"), std::string::npos) << stray.message();
}

TEST(TestModelTest, GeneratorArchsAreTinyOnlyAndNeedTheGenerator) {
  const std::string out = TestModels::Get().dir() + "/bad.gguf";
  Status st = MakeTestModel({"deepseek2", "small", 1}, out);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  ASSERT_EQ(setenv("PREFIXD_TEST_LLAMA_ARCHS", "/nonexistent/test-llama-archs", 1), 0);
  st = MakeTestModel({"deepseek2", "tiny", 1}, out);
  unsetenv("PREFIXD_TEST_LLAMA_ARCHS");
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("test-llama-archs"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(out));
}

// A generator arch keeps the generator's tensors byte for byte; only the vocabulary-sized ones
// (token_embd, output and qwen4exp's per-layer n-gram embeddings: 4 heads of n_vocab rows) are
// new, at the generator's scale.
TEST(TestModelTest, GeneratorArchKeepsItsTensorsAndResizesTheVocabularyOnes) {
  const GgufFile ours(TestModels::Get().Path("qwen4exp"));
  ASSERT_NE(ours.ctx, nullptr);
  EXPECT_EQ(ours.U64s("qwen4exp.ple.head_vocab_sizes"), "640 640 640 640 ");
  EXPECT_EQ(ours.U64s("qwen4exp.ple.head_offsets"), "0 640 1280 1920 ");
  auto upstream = test_model::UpstreamModel::Generate(
      "qwen4exp", 1, TestModels::Get().dir() + "/qwen4exp-upstream");
  ASSERT_TRUE(upstream.ok()) << upstream.status().ToString();
  EXPECT_EQ(upstream.value()->variant(), "moe");
  auto* theirs = const_cast<ggml_context*>(upstream.value()->tensors());
  std::vector<std::string> resized;
  int kept = 0, total = 0;
  for (int64_t i = 0; i < gguf_get_n_tensors(ours.ctx); ++i, ++total) {
    const ggml_tensor* t = ggml_get_tensor(ours.data, gguf_get_tensor_name(ours.ctx, i));
    ASSERT_NE(t, nullptr);
    const ggml_tensor* src = ggml_get_tensor(theirs, t->name);
    ASSERT_NE(src, nullptr) << t->name;
    if (ggml_are_same_shape(src, t)) {
      EXPECT_EQ(std::memcmp(src->data, t->data, ggml_nbytes(t)), 0) << t->name;
      ++kept;
      continue;
    }
    resized.push_back(t->name);
    EXPECT_EQ(src->ne[0], t->ne[0]) << t->name;
    EXPECT_EQ(t->ne[1] * 128, src->ne[1] * 640) << t->name;  // the generator's n_vocab is 128
  }
  EXPECT_EQ(resized, (std::vector<std::string>{"token_embd.weight", "output.weight",
                                               "per_layer_token_embd.weight"}));
  EXPECT_EQ(kept, total - 3);
  EXPECT_GT(kept, 50);
}

common_chat_msg Msg(const std::string& role, const std::string& content,
                    const std::string& reasoning = "") {
  common_chat_msg m;
  m.role = role;
  m.content = content;
  m.reasoning_content = reasoning;
  return m;
}

std::string Render(llama_model* model, const std::vector<common_chat_msg>& messages,
                   bool add_generation_prompt) {
  common_chat_templates_ptr tmpls = common_chat_templates_init(model, "");
  common_chat_templates_inputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  in.use_jinja = true;
  return common_chat_templates_apply(tmpls.get(), in).prompt;
}

TEST(TestModelTest, ChatTemplateStripsReasoningOfEarlierTurns) {
  llama_model* model = TestModels::Get().Model("llama");
  ASSERT_NE(model, nullptr);
  const std::vector<common_chat_msg> turns = {
      Msg("system", "You are terse."),
      Msg("user", "Q1"),
      Msg("assistant", "A1", "R1"),
      Msg("user", "Q2"),
      Msg("assistant", "<think>\nR2\n</think>\n\nA2"),
  };
  // Before the last user message: the reasoning is gone, the answer stays.
  const std::vector<common_chat_msg> three(turns.begin(), turns.begin() + 4);
  const std::string p3 = Render(model, three, true);
  EXPECT_EQ(p3,
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n");
  // After the last user message: the reasoning is kept, from either field.
  const std::string p4 = Render(model, turns, false);
  EXPECT_NE(p4.find("<|im_start|>assistant\n<think>\nR2\n</think>\n\nA2<|im_end|>\n"),
            std::string::npos)
      << p4;
  EXPECT_EQ(p4.find("R1"), std::string::npos) << p4;
  const std::vector<common_chat_msg> two = {Msg("user", "Q1"), Msg("assistant", "A1", "R1")};
  EXPECT_EQ(Render(model, two, false),
            "<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>\n");
}


// Real tokenizers: a model made with --vocab tokenizes as the vocab-only GGUF does,
// carries its chat template (or --template's), is a few tens of MB with a 250K vocabulary,
// and is the same file for the same seed.
struct VocabCase {
  std::string arch;
  std::string vocab;
  std::string chat_template;  // "" : the vocab's own
  size_t max_mib;
};

class RealVocabTest : public ::testing::TestWithParam<VocabCase> {};

std::unique_ptr<llama_model, ModelFree> LoadFile(const std::string& path, bool vocab_only) {
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  params.vocab_only = vocab_only;
  return std::unique_ptr<llama_model, ModelFree>(llama_model_load_from_file(path.c_str(), params));
}

TEST_P(RealVocabTest, TokenizesAsTheVocabAndKeepsItsTemplate) {
  const VocabCase& c = GetParam();
  const std::string path = TestModels::Get().dir() + "/" + c.arch + "-" + c.vocab + ".gguf";
  TestModelSpec spec{c.arch, "tiny", 3};
  spec.vocab = c.vocab;
  spec.chat_template = c.chat_template;
  ASSERT_TRUE(MakeTestModel(spec, path).ok());
  EXPECT_LE(fs::file_size(path), c.max_mib << 20);
  auto vocab_path = ResolveVocabPath(c.vocab);
  ASSERT_TRUE(vocab_path.ok());
  auto ref = LoadFile(*vocab_path, true);
  auto made = LoadFile(path, false);
  ASSERT_TRUE(ref && made);
  const llama_vocab* rv = llama_model_get_vocab(ref.get());
  const llama_vocab* mv = llama_model_get_vocab(made.get());
  EXPECT_EQ(llama_vocab_n_tokens(mv), llama_vocab_n_tokens(rv));
  EXPECT_EQ(llama_vocab_bos(mv), llama_vocab_bos(rv));
  EXPECT_EQ(llama_vocab_eos(mv), llama_vocab_eos(rv));
  EXPECT_EQ(llama_vocab_get_add_bos(mv), llama_vocab_get_add_bos(rv));
  // The pinned source's own tokenizer test inputs, and text with chat markup.
  std::string text = ReadFile(*vocab_path + ".inp") + kEnglish +
                     "<|im_start|>user\n<think>x</think><start_of_turn>model\n"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>";
  for (bool special : {false, true}) {
    const auto want = Tokenize(rv, text, special);
    ASSERT_GT(want.size(), 100u);
    EXPECT_EQ(Tokenize(mv, text, special), want) << "parse_special " << special;
  }
  const char* tmpl = llama_model_chat_template(made.get(), nullptr);
  if (c.chat_template.empty()) {
    const char* want = llama_model_chat_template(ref.get(), nullptr);
    EXPECT_EQ(tmpl == nullptr, want == nullptr);
    if (tmpl && want) EXPECT_EQ(std::string(tmpl), std::string(want));
  } else {
    ASSERT_NE(tmpl, nullptr);
    EXPECT_EQ(std::string(tmpl), *LoadTemplateSource(c.chat_template));
  }
  // Same seed, same bytes.
  const std::string again = path + ".again";
  ASSERT_TRUE(MakeTestModel(spec, again).ok());
  EXPECT_TRUE(ReadFile(path) == ReadFile(again));
  fs::remove(again);
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Vocabs, RealVocabTest,
    ::testing::Values(VocabCase{"qwen35", "qwen35", "", 48},
                      VocabCase{"llama", "llama-bpe", "meta-llama-Llama-3.1-8B-Instruct", 40},
                      VocabCase{"gemma4", "gemma-4", "", 96}),
    [](const ::testing::TestParamInfo<VocabCase>& info) {
      std::string name = info.param.arch + "_" + info.param.vocab +
                         (info.param.chat_template.empty() ? "" : "_template");
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(TestModelTest, UnknownVocabOrTemplateIsNotFound) {
  const std::string path = TestModels::Get().dir() + "/missing.gguf";
  TestModelSpec spec{"qwen35", "tiny", 1};
  spec.vocab = "no-such-vocab";
  EXPECT_EQ(MakeTestModel(spec, path).code(), Status::Code::kNotFound);
  spec.vocab = "qwen35";
  spec.chat_template = "no-such-template";
  EXPECT_EQ(MakeTestModel(spec, path).code(), Status::Code::kNotFound);
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace prefixd::engine
