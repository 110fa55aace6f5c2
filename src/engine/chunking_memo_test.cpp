// The chunking probe's memo: remembered per key, other keys kept, a damaged line never trusted.
#include "engine/chunking_memo.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace prefixd::engine {
namespace {

std::string TempMemo(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/chunking_memo_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir + "/chunking.tsv";
}

Digest Key(uint8_t b) {
  Digest d{};
  d.fill(b);
  return d;
}

TEST(ChunkingMemo, RemembersEachKey) {
  const std::string path = TempMemo("each");
  EXPECT_FALSE(LoadChunkingInvariant(path, Key(1)).has_value());  // no file yet
  ASSERT_TRUE(SaveChunkingInvariant(path, Key(1), true).ok());
  ASSERT_TRUE(SaveChunkingInvariant(path, Key(2), false).ok());
  EXPECT_EQ(LoadChunkingInvariant(path, Key(1)), std::optional<bool>(true));
  EXPECT_EQ(LoadChunkingInvariant(path, Key(2)), std::optional<bool>(false));
  EXPECT_FALSE(LoadChunkingInvariant(path, Key(3)).has_value());
  ASSERT_TRUE(SaveChunkingInvariant(path, Key(1), false).ok());  // overwritten, not duplicated
  EXPECT_EQ(LoadChunkingInvariant(path, Key(1)), std::optional<bool>(false));
}

TEST(ChunkingMemo, DamagedLineIsIgnored) {
  const std::string path = TempMemo("damaged");
  ASSERT_TRUE(SaveChunkingInvariant(path, Key(1), false).ok());
  std::string text;
  {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const size_t tab = text.find('\t');
  ASSERT_NE(tab, std::string::npos);
  text[tab + 1] = '1';  // the answer flipped, the checksum not
  std::ofstream(path, std::ios::trunc) << text;
  EXPECT_FALSE(LoadChunkingInvariant(path, Key(1)).has_value());
}

TEST(ChunkingMemo, KeyCoversTheSettings) {
  ContextOptions a;
  ContextOptions b = a;
  b.flash_attn = !a.flash_attn;
  ContextOptions c = a;
  c.n_ubatch = a.n_ubatch / 2;
  ContextOptions d = a;
  d.type_k = KvType::kQ8_0;
  const Digest model = Key(7);
  const std::string cpu = "default";
  EXPECT_EQ(ChunkingKey(model, a, 0, cpu), ChunkingKey(model, a, 0, cpu));
  EXPECT_NE(ChunkingKey(model, a, 0, cpu), ChunkingKey(model, b, 0, cpu));
  EXPECT_NE(ChunkingKey(model, a, 0, cpu), ChunkingKey(model, c, 0, cpu));
  EXPECT_NE(ChunkingKey(model, a, 0, cpu), ChunkingKey(model, d, 0, cpu));
  EXPECT_NE(ChunkingKey(model, a, 0, cpu), ChunkingKey(model, a, 99, cpu));
  EXPECT_NE(ChunkingKey(model, a, 0, cpu), ChunkingKey(model, a, 0, "RPC0 (127.0.0.1:50052)"));
  EXPECT_NE(ChunkingKey(model, a, 0, cpu), ChunkingKey(Key(8), a, 0, cpu));
}

}  // namespace
}  // namespace prefixd::engine
