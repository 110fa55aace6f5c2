// The start-up codec probe: every memory type the codec reads is proven sliced on a real
// model (prefixd's nine test models and llama.cpp's generated ones); what it cannot read
// (deepseek4's own cache) or what is asked for (--whole-state) gets whole-state snapshots.
#include "engine/codec_probe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "engine/state_codec_test_util.h"
#include "engine/testgen/test_model.h"

namespace prefixd::engine {
namespace {

using testing::CodecContextOptions;
using testing::GeneratedModels;

CodecProbe Probe(const Model& model, bool force_whole, bool flash_attn = false) {
  ContextOptions o = CodecContextOptions(flash_attn);
  o.n_ubatch = o.n_batch;  // the chunking check's chunks are not split into micro-batches
  auto ctx = Context::Create(model, o);
  EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (!ctx.ok()) return {};
  auto probe = ProbeStateCodec(**ctx, 0, force_whole);
  EXPECT_TRUE(probe.ok()) << probe.status().ToString();
  if (!probe.ok()) return {};
  EXPECT_EQ((*ctx)->SeqPosMax(0), -1) << "the probe leaves its sequence empty";
  return *probe;
}

TEST(CodecProbe, SlicesEveryTestModel) {
  const auto dir = std::filesystem::temp_directory_path() / ("prefixd-probe-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string& arch : TestModelArchs()) {
    const std::string path = (dir / (arch + ".gguf")).string();
    ASSERT_TRUE(MakeTestModel({arch, "tiny", 3}, path).ok()) << arch;
    auto model = Model::Load({path, 0});
    ASSERT_TRUE(model.ok()) << arch;
    CodecProbe p = Probe(**model, false);
    EXPECT_EQ(p.mode, StateMode::kSliced) << arch << ": " << p.why_whole;
    EXPECT_TRUE(p.shape.has_value()) << arch;
    CodecProbe forced = Probe(**model, true);
    EXPECT_EQ(forced.mode, StateMode::kWhole) << arch;
  }
  std::filesystem::remove_all(dir);
}

TEST(CodecProbe, SlicesEveryReaderAndFallsBackOnDsv4) {
  std::stringstream archs(testing::kGeneratedArchs);
  std::string arch;
  int sliced = 0;
  while (std::getline(archs, arch, '|')) {
    const Model* model = GeneratedModels::Get().Load(arch);
    ASSERT_NE(model, nullptr) << arch;
    CodecProbe p = Probe(*model, false);
    if (model->layout() == MemoryLayout::kDsv4) {
      EXPECT_EQ(p.mode, StateMode::kWhole) << arch;
      EXPECT_FALSE(p.why_whole.empty());
      continue;
    }
    EXPECT_EQ(p.mode, StateMode::kSliced) << arch << ": " << p.why_whole;
    sliced += p.mode == StateMode::kSliced;
  }
  EXPECT_GE(sliced, 13);
}

// The chunking check (one call of 64 rows against calls of 37 and 27). Without flash attention
// every test model (gemma4 included) gives bit-identical logits however a prompt is cut into
// calls of 2 rows or more: what makes a restored prefix equal a cold run. With flash attention
// on CPU the same holds since llama.cpp patch 0013 (a call under 64 rows is tiled as a longer
// one's partial tiles are); before it, the 37- and 27-row calls took the per-row path and the
// logits moved in the last bits wherever a model has attention.
TEST(CodecProbe, FindsChunkingDependence) {
  const auto dir = std::filesystem::temp_directory_path() / ("prefixd-chunking-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> archs = TestModelArchs();
  archs.push_back("gemma4");
  for (const std::string& arch : archs) {
    const std::string path = (dir / (arch + ".gguf")).string();
    ASSERT_TRUE(MakeTestModel({arch, "tiny", 3}, path).ok()) << arch;
    auto model = Model::Load({path, 0});
    ASSERT_TRUE(model.ok()) << arch;
    EXPECT_TRUE(Probe(**model, false, false).chunking_invariant) << arch << " without flash attention";
    EXPECT_TRUE(Probe(**model, false, true).chunking_invariant) << arch << " with flash attention";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace prefixd::engine
