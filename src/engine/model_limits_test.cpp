// What a model can serve, decided at load: a model with learned absolute positions
// (gpt2) gets its context capped at the trained length, so that an over-long prompt is refused
// instead of aborting the process in llama.cpp's get_rows; a diffusion model is refused at load.
// The models come from the pinned llama.cpp's own generator, test-llama-archs (set up by
// scripts/setup-llama.sh); their trained context is 256 tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "engine/engine.h"
#include "engine/model/model.h"

namespace prefixd::engine {
namespace {

namespace fs = std::filesystem;

constexpr int kTrainedCtx = 256;  // test-llama-archs writes context_length = 256

// A temporary folder, removed with everything in it at exit.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("prefixd-model-limits-" + std::to_string(getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The generated model of `arch` ("gpt2" -> gpt2-dense.gguf), or "" when the generator is absent.
std::string ArchModel(const std::string& arch) {
  static std::map<std::string, std::string> made;
  if (auto it = made.find(arch); it != made.end()) return it->second;
  const std::string bin = PREFIXD_TEST_LLAMA_ARCHS;
  if (!fs::exists(bin)) return "";
  static TempDir temp;
  const fs::path& dir = temp.path;
  std::string cmd = "'" + bin + "' -s 42 -a '" + arch + "' -o '" + dir.string() + "' >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string path;
  for (const char* suffix : {"-dense.gguf", "-moe.gguf"}) {
    if (fs::exists(dir / (arch + suffix))) path = (dir / (arch + suffix)).string();
  }
  EXPECT_FALSE(path.empty()) << "test-llama-archs wrote no model for " << arch;
  return made[arch] = path;
}

#define REQUIRE_ARCH_MODEL(path, arch)                                                       \
  const std::string path = ArchModel(arch);                                                  \
  if (path.empty()) GTEST_SKIP() << "no test-llama-archs at " << PREFIXD_TEST_LLAMA_ARCHS     \
                                 << " (scripts/setup-llama.sh builds it)"

std::unique_ptr<Engine> MakeEngine(const std::string& path, uint32_t n_ctx) {
  EngineOptions o;
  o.model_path = path;
  o.n_ctx_per_slot = n_ctx;
  o.block_size = 32;
  o.n_batch = 128;
  o.n_ubatch = 128;
  o.n_threads = 2;
  o.flash_attn = false;
  o.ram_budget_bytes = 64ull << 20;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

CompletionRequest RequestOf(int32_t n_prompt, int max_tokens) {
  CompletionRequest r;
  for (int32_t i = 0; i < n_prompt; ++i) r.prompt.tokens.push_back(1 + (i * 7) % 100);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

TEST(ModelLimitsTest, LearnedPositionsBoundTheContext) {
  REQUIRE_ARCH_MODEL(path, "gpt2");
  auto model = Model::Load({path, 0});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->n_ctx_train(), kTrainedCtx);
  EXPECT_EQ((*model)->n_pos_max(), kTrainedCtx);
}

TEST(ModelLimitsTest, RopeModelIsNotBounded) {
  REQUIRE_ARCH_MODEL(path, "llama");
  auto model = Model::Load({path, 0});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->n_pos_max(), 0);
  auto engine = MakeEngine(path, 1024);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->n_ctx_per_slot(), 1024u);  // beyond the trained 256: RoPE allows it
}

TEST(ModelLimitsTest, ContextIsCappedAndAnOverLongPromptIsRefused) {
  REQUIRE_ARCH_MODEL(path, "gpt2");
  auto engine = MakeEngine(path, 4096);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->n_ctx_per_slot(), uint32_t(kTrainedCtx));
  // Without the cap this prompt reaches position 300 of a 256-row table: llama.cpp aborts.
  auto refused = engine->Complete(RequestOf(300, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
  // A prompt that fits generates up to the last trained position and stops there.
  auto fits = engine->Complete(RequestOf(kTrainedCtx - 8, 64));
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->finish_reason, FinishReason::kLength);
  EXPECT_LE(fits->usage.prompt_tokens + fits->usage.completion_tokens, kTrainedCtx);
}

TEST(ModelLimitsTest, ContextZeroIsTheTrainedLength) {
  REQUIRE_ARCH_MODEL(path, "gpt2");
  auto engine = MakeEngine(path, 0);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->n_ctx_per_slot(), uint32_t(kTrainedCtx));
}

TEST(ModelLimitsTest, DiffusionModelIsRefusedAtLoad) {
  REQUIRE_ARCH_MODEL(path, "dream");
  auto model = Model::Load({path, 0});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(model.status().ToString().find("diffusion"), std::string::npos)
      << model.status().ToString();
  EngineOptions o;
  o.model_path = path;
  auto engine = Engine::Create(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().ToString().find("dream"), std::string::npos);
}

}  // namespace
}  // namespace prefixd::engine
