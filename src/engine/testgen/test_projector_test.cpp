#include "engine/testgen/test_projector.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/testgen/test_model.h"
#include "gguf.h"
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

namespace prefixd::engine {
namespace {

namespace fs = std::filesystem;

struct ModelFree {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
struct ContextFree {
  void operator()(llama_context* c) const { llama_free(c); }
};
using ModelPtr = std::unique_ptr<llama_model, ModelFree>;
using ContextPtr = std::unique_ptr<llama_context, ContextFree>;

void QuietMtmdLog(ggml_log_level, const char*, void*) {}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One tiny text model and its projector per arch, written to a folder and loaded once for the
// binary; freed and deleted when the tests end.
struct Loaded {
  ModelPtr model;
  mtmd::context_ptr mtmd;
};

class Fixtures {
 public:
  static Fixtures& Get() {
    if (instance_ == nullptr) instance_ = new Fixtures();
    return *instance_;
  }
  static void Destroy() {
    if (instance_ == nullptr) return;
    instance_->loaded_.clear();
    fs::remove_all(instance_->dir_);
    delete instance_;
    instance_ = nullptr;
  }
  const std::string& dir() const { return dir_; }
  Loaded& Load(const std::string& arch) {
    Loaded& l = loaded_[arch];
    if (!l.mtmd) LoadInto(arch, &l);
    return l;
  }

 private:
  Fixtures() {
    EnsureBackendInitialized();
    mtmd_helper_log_set(QuietMtmdLog, nullptr);
    char tmpl[] = "/tmp/prefixd-test-projector-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void LoadInto(const std::string& arch, Loaded* l) {
    const std::string text = dir_ + "/" + arch + ".gguf";
    const std::string proj = dir_ + "/" + arch + "-mmproj.gguf";
    const TestModelSpec spec{arch, "tiny", 1};
    Status st = MakeTestModel(spec, text);
    EXPECT_TRUE(st.ok()) << st.ToString();
    st = MakeTestProjector(spec, proj);
    EXPECT_TRUE(st.ok()) << st.ToString();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    l->model.reset(llama_model_load_from_file(text.c_str(), mp));
    if (!l->model) return;
    mtmd_context_params cp = mtmd_context_params_default();
    cp.use_gpu = false;
    cp.warmup = false;
    cp.n_threads = 2;
    cp.print_timings = false;
    l->mtmd.reset(mtmd_init_from_file(proj.c_str(), l->model.get(), cp));
  }
  static inline Fixtures* instance_ = nullptr;
  std::string dir_;
  std::map<std::string, Loaded> loaded_;
};

class FixturesCleanup : public ::testing::Environment {
 public:
  void TearDown() override { Fixtures::Destroy(); }
};
::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new FixturesCleanup());

std::string TempDir() { return Fixtures::Get().dir(); }

// A w x h RGB image whose pixels are drawn from `seed`.
std::vector<unsigned char> Pixels(uint32_t w, uint32_t h, uint32_t seed) {
  std::vector<unsigned char> rgb(size_t(w) * h * 3);
  uint32_t x = seed * 2654435761u + 1;
  for (unsigned char& c : rgb) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<unsigned char>(x >> 24);
  }
  return rgb;
}

// What a 64x48 image makes on each arch's projector (docs/test-models.md): tokens, and the
// positions they advance (M-RoPE on qwen35: max(nx, ny) of a 4x3 grid).
struct ImageSize {
  size_t n_tokens;
  llama_pos n_pos;
};
const std::map<std::string, ImageSize>& Expected64x48() {
  static const std::map<std::string, ImageSize> kSizes = {
      {"gemma3", {16, 16}}, {"lfm2", {70, 70}}, {"qwen35", {12, 4}}, {"gemma4", {80, 80}}};
  return kSizes;
}

class TestProjectorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    loaded_ = &Fixtures::Get().Load(GetParam());
    ASSERT_NE(loaded_->model, nullptr);
    ASSERT_NE(loaded_->mtmd, nullptr) << "libmtmd rejected the projector";
  }
  mtmd_context* mtmd() { return loaded_->mtmd.get(); }

  // Tokenizes a prompt with one image of `pixels` and returns its chunks.
  mtmd::input_chunks_ptr Tokenize(const std::vector<unsigned char>& pixels, uint32_t w,
                                  uint32_t h, const std::string& id) {
    mtmd::bitmap bitmap(w, h, pixels.data());
    bitmap.set_id(id.c_str());  // an id per image: the default, empty, makes them all equal
    const std::string prompt = std::string("Describe ") + mtmd_default_marker() + " briefly.";
    const mtmd_input_text text = {prompt.c_str(), prompt.size(), /*add_special=*/true,
                                  /*parse_special=*/true};
    const mtmd_bitmap* bitmaps[] = {bitmap.ptr.get()};
    mtmd::input_chunks_ptr chunks(mtmd_input_chunks_init());
    EXPECT_EQ(mtmd_tokenize(mtmd(), chunks.get(), &text, bitmaps, 1), 0);
    return chunks;
  }

  // The one image chunk of `chunks`.
  static const mtmd_input_chunk* ImageChunk(const mtmd_input_chunks* chunks) {
    const mtmd_input_chunk* image = nullptr;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i) {
      const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
      if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_IMAGE) continue;
      EXPECT_EQ(image, nullptr) << "more than one image chunk";
      image = c;
    }
    return image;
  }

  // Encodes the image of a prompt with `pixels` and returns its embeddings.
  std::vector<float> Encode(const std::vector<unsigned char>& pixels, uint32_t w, uint32_t h,
                            const std::string& id) {
    mtmd::input_chunks_ptr chunks = Tokenize(pixels, w, h, id);
    const mtmd_input_chunk* image = ImageChunk(chunks.get());
    if (image == nullptr) return {};
    EXPECT_EQ(mtmd_encode_chunk(mtmd(), image), 0);
    const size_t n = mtmd_input_chunk_get_n_tokens(image) *
                     size_t(llama_model_n_embd_inp(loaded_->model.get()));
    const float* embd = mtmd_get_output_embd(mtmd());
    return std::vector<float>(embd, embd + n);
  }

  Loaded* loaded_ = nullptr;
};

TEST_P(TestProjectorTest, ImageBecomesFiniteEmbeddingsOfTheTextWidth) {
  const std::vector<unsigned char> pixels = Pixels(64, 48, 1);
  mtmd::input_chunks_ptr chunks = Tokenize(pixels, 64, 48, "a");
  const mtmd_input_chunk* image = ImageChunk(chunks.get());
  ASSERT_NE(image, nullptr);
  const size_t n_tokens = mtmd_input_chunk_get_n_tokens(image);
  EXPECT_EQ(n_tokens, Expected64x48().at(GetParam()).n_tokens);
  EXPECT_EQ(mtmd_input_chunk_get_n_pos(image), Expected64x48().at(GetParam()).n_pos);

  const std::vector<float> embd = Encode(pixels, 64, 48, "a");
  ASSERT_EQ(embd.size(), n_tokens * size_t(llama_model_n_embd_inp(loaded_->model.get())));
  size_t n_finite = 0;
  for (float v : embd) n_finite += std::isfinite(v) ? 1 : 0;
  EXPECT_EQ(n_finite, embd.size());
  bool varies = false;
  for (float v : embd) varies = varies || v != embd[0];
  EXPECT_TRUE(varies) << "every embedding value is " << embd[0];
}

TEST_P(TestProjectorTest, SameImageSameEmbeddingsOtherImageOthers) {
  const std::vector<float> first = Encode(Pixels(64, 48, 1), 64, 48, "a");
  const std::vector<float> again = Encode(Pixels(64, 48, 1), 64, 48, "a-again");
  const std::vector<float> other = Encode(Pixels(64, 48, 2), 64, 48, "b");
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(first.size(), again.size());
  EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0);
  ASSERT_EQ(first.size(), other.size());  // same size, same token count
  EXPECT_NE(std::memcmp(first.data(), other.data(), first.size() * sizeof(float)), 0);
}

TEST_P(TestProjectorTest, PromptWithImageDecodesIntoAContext) {
  mtmd::input_chunks_ptr chunks = Tokenize(Pixels(64, 48, 3), 64, 48, "c");
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 1024;
  cp.n_batch = 512;
  cp.n_ubatch = 512;  // non-causal images (gemma3) must fit one ubatch
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  ContextPtr ctx(llama_init_from_model(loaded_->model.get(), cp));
  ASSERT_NE(ctx, nullptr);
  llama_pos n_past = 0;
  ASSERT_EQ(mtmd_helper_eval_chunks(mtmd(), ctx.get(), chunks.get(), 0, 0, 512,
                                    /*logits_last=*/true, &n_past),
            0);
  EXPECT_EQ(n_past, mtmd_helper_get_n_pos(chunks.get()));
  const float* logits = llama_get_logits_ith(ctx.get(), -1);
  ASSERT_NE(logits, nullptr);
  EXPECT_TRUE(std::isfinite(logits[0]));
}

INSTANTIATE_TEST_SUITE_P(Archs, TestProjectorTest,
                         ::testing::ValuesIn(ProjectorTestModelArchs()),
                         [](const auto& info) { return info.param; });

TEST(TestProjector, SameSeedSameFileOtherSeedOtherWeights) {
  const std::string a = TempDir() + "/det-a.gguf", b = TempDir() + "/det-b.gguf";
  const std::string c = TempDir() + "/det-c.gguf";
  ASSERT_TRUE(MakeTestProjector({"gemma3", "tiny", 7}, a).ok());
  ASSERT_TRUE(MakeTestProjector({"gemma3", "tiny", 7}, b).ok());
  ASSERT_TRUE(MakeTestProjector({"gemma3", "tiny", 8}, c).ok());
  const std::string bytes_a = ReadFile(a);
  EXPECT_FALSE(bytes_a.empty());
  EXPECT_EQ(bytes_a, ReadFile(b));
  EXPECT_NE(bytes_a, ReadFile(c));
  EXPECT_FALSE(fs::exists(a + ".tmp"));
}

TEST(TestProjector, OutputWidthFollowsTheShape) {
  const std::string path = TempDir() + "/small-mmproj.gguf";
  ASSERT_TRUE(MakeTestProjector({"lfm2", "small", 1}, path).ok());
  gguf_init_params gp = {/*no_alloc=*/true, /*ctx=*/nullptr};
  gguf_context* ctx = gguf_init_from_file(path.c_str(), gp);
  ASSERT_NE(ctx, nullptr);
  const int64_t key = gguf_find_key(ctx, "clip.vision.projection_dim");
  ASSERT_GE(key, 0);
  EXPECT_EQ(gguf_get_val_u32(ctx, key), 1024u);  // the small shape's n_embd
  gguf_free(ctx);
}

TEST(TestProjector, RefusesAnArchWithoutAProjector) {
  const Status st = MakeTestProjector({"llama", "tiny", 1}, TempDir() + "/llama-mmproj.gguf");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.ToString().find("gemma3"), std::string::npos) << st.ToString();
  EXPECT_FALSE(fs::exists(TempDir() + "/llama-mmproj.gguf"));
}

}  // namespace
}  // namespace prefixd::engine
