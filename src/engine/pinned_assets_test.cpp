#include "engine/chat/pinned_assets.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace prefixd::engine {
namespace {

TEST(PinnedAssets, ResolvesTemplateNamesWithOrWithoutSuffix) {
  auto a = ResolveTemplatePath("Qwen3.5-4B");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = ResolveTemplatePath("Qwen3.5-4B.jinja");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  auto src = LoadTemplateSource("Qwen3.5-4B");
  ASSERT_TRUE(src.ok());
  EXPECT_NE(src->find("im_start"), std::string::npos);
  // A path is taken as it is.
  auto c = ResolveTemplatePath(*a);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *a);
}

TEST(PinnedAssets, ResolvesVocabNames) {
  auto a = ResolveVocabPath("qwen35");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_NE(a->find("ggml-vocab-qwen35.gguf"), std::string::npos);
  auto b = ResolveVocabPath("ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(b.ok());
}

TEST(PinnedAssets, UnknownNamesListTheKnownOnes) {
  auto a = ResolveTemplatePath("No-Such-Template");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().ToString().find("No-Such-Template"), std::string::npos);
  EXPECT_NE(a.status().ToString().find("Apertus"), std::string::npos);
  EXPECT_FALSE(ResolveTemplatePath("../templates/Qwen3.5-4B").ok());
  EXPECT_FALSE(ResolveVocabPath("nope").ok());
  EXPECT_FALSE(LoadTemplateSource("").ok());
}

TEST(PinnedAssets, ListsEveryShippedAsset) {
  auto t = PinnedTemplateNames();
  auto v = PinnedVocabNames();
  EXPECT_GE(t.size(), 60u);
  EXPECT_GE(v.size(), 15u);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  EXPECT_NE(std::find(v.begin(), v.end(), "gemma-4"), v.end());
}

}  // namespace
}  // namespace prefixd::engine
