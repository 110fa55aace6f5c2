#include "router/model_card.h"

#include <gtest/gtest.h>

#include <map>

namespace prefixd::router {
namespace {

// The trained contexts of imaginary files; a path not listed cannot be read.
TrainedContextFn Files(std::map<std::string, int64_t> files, int* calls) {
  return [files, calls](const std::string& path) -> Result<int64_t> {
    ++*calls;
    auto it = files.find(path);
    if (it == files.end()) return Status::IOError(path + ": cannot be read");
    return it->second;
  };
}

ModelSpec Spec(const std::string& path, int64_t ctx = -1, int64_t n_predict = -1) {
  ModelSpec s;
  s.id = "m";
  s.path = path;
  s.ctx = ctx;
  s.n_predict = n_predict;
  return s;
}

TEST(ModelCardTest, TheSectionsContextThenTheRoutersThenTheTrainedOne) {
  int calls = 0;
  const TrainedContextFn trained = Files({{"/a.gguf", 131072}}, &calls);
  ModelCard c = CardOf(Spec("/a.gguf", 8192, 512), {4096, 0}, trained);
  EXPECT_EQ(c.n_ctx, 8192);
  EXPECT_EQ(c.n_ctx_from, ContextSource::kConfigured);
  EXPECT_EQ(c.n_predict, 512);
  c = CardOf(Spec("/a.gguf"), {4096, 256}, trained);
  EXPECT_EQ(c.n_ctx, 4096);
  EXPECT_EQ(c.n_predict, 256);
  EXPECT_EQ(calls, 0) << "a configured context reads no file";
  // ctx 0 in the section (or nowhere): the trained length, as `serve --ctx 0` takes it.
  c = CardOf(Spec("/a.gguf", 0), {4096, 0}, trained);
  EXPECT_EQ(c.n_ctx, 131072);
  EXPECT_EQ(c.n_ctx_from, ContextSource::kTrained);
  EXPECT_STREQ(ContextSourceName(c.n_ctx_from), "trained");
  EXPECT_EQ(calls, 1);
}

TEST(ModelCardTest, AnUnreadableFileLeavesTheWindowUnknown) {
  int calls = 0;
  const TrainedContextFn trained = Files({{"/silent.gguf", 0}}, &calls);
  ModelCard c = CardOf(Spec("/broken.gguf"), {}, trained);
  EXPECT_EQ(c.n_ctx, 0);
  EXPECT_EQ(c.n_ctx_from, ContextSource::kUnknown);
  EXPECT_STREQ(ContextSourceName(c.n_ctx_from), "unknown");
  EXPECT_EQ(CardOf(Spec("/silent.gguf"), {}, trained).n_ctx, 0);
}

TEST(ModelCardTest, AProjectorMeansItReadsImages) {
  int calls = 0;
  ModelSpec s = Spec("/g3.gguf", 2048);
  EXPECT_FALSE(CardOf(s, {}, Files({}, &calls)).reads_images);
  s.mmproj = "/mmproj-g3.gguf";
  EXPECT_TRUE(CardOf(s, {}, Files({}, &calls)).reads_images);
}

TEST(ModelCardTest, TrainedContextOfReadsTheHeaderOnly) {
  EXPECT_FALSE(TrainedContextOf("/no/such/file.gguf").ok());
}

}  // namespace
}  // namespace prefixd::router
