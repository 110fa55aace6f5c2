#include "router/models_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "router/model_process.h"
#include "router/router.h"

namespace prefixd::router {
namespace {

TEST(ModelsFileTest, SectionsKeysAndServeFlags) {
  auto specs = ParseModelsFile(
      "# models\n[coder]\nmodel = coder.gguf ; relative\nalias = claude-*, gpt-5\n"
      "pinned = true\nttl = 600\nctx = 4096\nno-cache = true\n\n[small]\nmodel=/m/s.gguf\n",
      "models.ini", "/base");
  ASSERT_TRUE(specs.ok()) << specs.status().ToString();
  ASSERT_EQ(specs->size(), 2u);
  const ModelSpec& c = (*specs)[0];
  EXPECT_EQ(c.id, "coder");
  EXPECT_EQ(c.path, "/base/coder.gguf");
  EXPECT_EQ(c.aliases, (std::vector<std::string>{"claude-*", "gpt-5"}));
  EXPECT_TRUE(c.pinned);
  EXPECT_EQ(c.ttl_s, 600);
  EXPECT_EQ(c.args, (std::vector<std::string>{"--ctx", "4096", "--no-cache"}));
  EXPECT_EQ((*specs)[1].path, "/m/s.gguf");
  EXPECT_EQ((*specs)[1].ttl_s, -1);
  EXPECT_TRUE(SpecMatches(c, "claude-sonnet-4-5"));
  EXPECT_FALSE(SpecMatches(c, "gpt-4o"));
}

TEST(ModelsFileTest, ErrorsNameTheLine) {
  auto no_section = ParseModelsFile("model = x.gguf\n", "m.ini", "");
  ASSERT_FALSE(no_section.ok());
  EXPECT_NE(no_section.status().message().find("m.ini:1"), std::string::npos);
  auto bad_ttl = ParseModelsFile("[a]\nmodel=a.gguf\nttl = soon\n", "m.ini", "");
  EXPECT_NE(bad_ttl.status().message().find("m.ini:3"), std::string::npos);
  auto router_key = ParseModelsFile("[a]\nport = 9\n", "m.ini", "");
  EXPECT_NE(router_key.status().message().find("the router's"), std::string::npos);
  auto no_eq = ParseModelsFile("[a]\nmodel\n", "m.ini", "");
  EXPECT_NE(no_eq.status().message().find("key = value"), std::string::npos);
}

TEST(ModelsFileTest, MergeOverridesTheDirAndChecksIds) {
  const std::string dir = testing::TempDir() + "/models_dir_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  for (const char* f : {"b.gguf", "a.gguf", "notes.txt"}) std::fclose(std::fopen((dir + "/" + f).c_str(), "w"));
  auto scanned = ScanModelsDir(dir);
  ASSERT_TRUE(scanned.ok());
  ASSERT_EQ(scanned->size(), 2u);
  EXPECT_EQ((*scanned)[0].id, "a");
  auto file = ParseModelsFile("[a]\npinned = true\n[c]\nmodel = /x/c.gguf\n", "f", dir);
  ASSERT_TRUE(file.ok());
  auto merged = MergeSpecs(*scanned, *file);
  ASSERT_TRUE(merged.ok());
  ASSERT_EQ(merged->size(), 3u);
  EXPECT_TRUE((*merged)[0].pinned);
  EXPECT_EQ((*merged)[0].path, dir + "/a.gguf");  // the dir's file, the file's settings
  auto twice = MergeSpecs({}, *ParseModelsFile("[x]\nmodel=1\n[x]\nmodel=2\n", "f", ""));
  EXPECT_FALSE(twice.ok());
  auto none = MergeSpecs({}, {});
  EXPECT_FALSE(none.ok());
  auto pattern = MergeSpecs({}, *ParseModelsFile("[x*]\nmodel=1\n", "f", ""));
  EXPECT_FALSE(pattern.ok());
  // An id names the model's cache dir under the router's: none may name another dir.
  for (const char* id : {"..", ".", ".hidden", "a/b", "a b", "x\\y"}) {
    auto bad = MergeSpecs({}, *ParseModelsFile(std::string("[") + id + "]\nmodel=1\n", "f", ""));
    EXPECT_FALSE(bad.ok()) << id;
  }
  EXPECT_TRUE(MergeSpecs({}, *ParseModelsFile("[qwen3.5-9b:q4_K_M]\nmodel=1\n", "f", "")).ok());
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(ScanModelsDir(dir).ok());
}

TEST(ChildArgsTest, LoopbackAndItsOwnCacheDirComeLast) {
  ChildLauncherOptions o;
  o.common_args = {"--threads", "2", "--host", "0.0.0.0"};
  o.cache_root = "/c";
  ModelSpec s;
  s.id = "m";
  s.path = "/m.gguf";
  s.aliases = {"claude-*"};
  s.args = {"--ctx", "512"};
  EXPECT_EQ(ChildArgs(o, s),
            (std::vector<std::string>{"serve", "-m", "/m.gguf", "--threads", "2", "--host",
                                      "0.0.0.0", "--ctx", "512", "--alias", "m,claude-*",
                                      "--host", "127.0.0.1", "--port", "0", "--cache-dir",
                                      "/c/models/m"}));
}

TEST(LabelMetricsTest, EverySampleGetsTheModelLabel) {
  EXPECT_EQ(LabelMetrics("# TYPE x counter\nx 3\ny{tier=\"disk\"} 4\nz{} 5\n", "q"),
            "# TYPE x counter\nx{model=\"q\"} 3\ny{model=\"q\",tier=\"disk\"} 4\n"
            "z{model=\"q\"} 5\n");
}

}  // namespace
}  // namespace prefixd::router
