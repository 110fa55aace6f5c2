#include "router/models_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <initializer_list>

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

// Empty files at `rel` under `root` (the scan reads names only).
void Touch(const std::string& root, std::initializer_list<const char*> rel) {
  for (const char* r : rel) {
    const std::filesystem::path p = std::filesystem::path(root) / r;
    std::filesystem::create_directories(p.parent_path());
    std::fclose(std::fopen(p.c_str(), "w"));
  }
}

TEST(ModelsFileTest, ProjectorAndWindowKeys) {
  auto specs = ParseModelsFile(
      "[g3]\nmodel = g3/g3.gguf\nmmproj = g3/mmproj-g3.gguf\nimage-max-tokens = 256\n"
      "no-mmproj-offload = true\nctx = 8192\nn-predict = 512\n"
      "[abs]\nmodel = /m/a.gguf\nmm = /m/mmproj-a.gguf\nc = 0\n",
      "models.ini", "/base");
  ASSERT_TRUE(specs.ok()) << specs.status().ToString();
  const ModelSpec& g3 = (*specs)[0];
  EXPECT_EQ(g3.mmproj, "/base/g3/mmproj-g3.gguf");
  EXPECT_FALSE(g3.no_mmproj);
  EXPECT_EQ(g3.ctx, 8192);
  EXPECT_EQ(g3.n_predict, 512);
  // The image settings are serve flags; the projector goes as --mmproj (ChildArgs), not twice.
  EXPECT_EQ(g3.args, (std::vector<std::string>{"--image-max-tokens", "256", "--no-mmproj-offload",
                                               "--ctx", "8192", "--n-predict", "512"}));
  EXPECT_EQ((*specs)[1].mmproj, "/m/mmproj-a.gguf");
  EXPECT_EQ((*specs)[1].ctx, 0);
  EXPECT_EQ((*specs)[1].n_predict, -1);
  EXPECT_EQ((*specs)[1].args, (std::vector<std::string>{"--ctx", "0"}));
  for (const char* bad : {"ctx = 8", "ctx = big", "n-predict = -1", "ctx = 99999999"}) {
    auto st = ParseModelsFile(std::string("[a]\nmodel = a.gguf\n") + bad + "\n", "m.ini", "");
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.status().message().find("m.ini:3"), std::string::npos) << st.status().ToString();
  }
}

TEST(ModelsDirTest, AFolderIsAModelWithTheProjectorBesideIt) {
  const std::string dir = testing::TempDir() + "/models_scan_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  Touch(dir, {"plain.gguf", "mmproj-stray.gguf", "notes.txt", ".hidden.gguf",
              "g3/g3-it-Q4_K_M.gguf", "g3/mmproj-g3-F16.gguf", "g3/README.md",
              "big/big-00001-of-00002.gguf", "big/big-00002-of-00002.gguf",
              "quants/q-Q4.gguf", "quants/q-Q8.gguf", "quants/q-mmproj.gguf",
              "empty/notes.txt", "onlyproj/mmproj-x.gguf",
              "split-00001-of-00003.gguf", "split-00002-of-00003.gguf"});
  auto scanned = ScanModelsDir(dir);
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  std::vector<std::string> ids;
  for (const ModelSpec& s : *scanned) ids.push_back(s.id);
  // A stray projector, a hidden file, later shards and folders without a model are not models.
  EXPECT_EQ(ids, (std::vector<std::string>{"big", "g3", "plain", "q-Q4", "q-Q8", "split"}));
  auto by_id = [&](const std::string& id) {
    for (const ModelSpec& s : *scanned) {
      if (s.id == id) return s;
    }
    return ModelSpec();
  };
  EXPECT_EQ(by_id("g3").path, dir + "/g3/g3-it-Q4_K_M.gguf");
  EXPECT_EQ(by_id("g3").mmproj, dir + "/g3/mmproj-g3-F16.gguf");
  EXPECT_EQ(by_id("big").path, dir + "/big/big-00001-of-00002.gguf");
  EXPECT_EQ(by_id("big").mmproj, "");
  EXPECT_EQ(by_id("q-Q8").mmproj, dir + "/quants/q-mmproj.gguf");
  EXPECT_EQ(by_id("plain").mmproj, "");
  EXPECT_EQ(by_id("split").path, dir + "/split-00001-of-00003.gguf");

  // A file's section keeps the folder's projector unless it names another or none.
  auto file = ParseModelsFile("[g3]\nctx = 4096\n[q-Q4]\nno-mmproj = true\n"
                              "[q-Q8]\nmmproj = /elsewhere/p.gguf\n", "f", dir);
  ASSERT_TRUE(file.ok());
  auto merged = MergeSpecs(*scanned, *file);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  for (const ModelSpec& s : *merged) {
    if (s.id == "g3") EXPECT_EQ(s.mmproj, dir + "/g3/mmproj-g3-F16.gguf");
    if (s.id == "g3") EXPECT_EQ(s.path, dir + "/g3/g3-it-Q4_K_M.gguf");
    if (s.id == "q-Q4") EXPECT_EQ(s.mmproj, "");
    if (s.id == "q-Q8") EXPECT_EQ(s.mmproj, "/elsewhere/p.gguf");
  }

  // Two projectors in a folder: which one is the model's? An error naming both.
  Touch(dir, {"g3/mmproj-g3-F32.gguf"});
  auto two = ScanModelsDir(dir);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("mmproj-g3-F16.gguf and mmproj-g3-F32.gguf"),
            std::string::npos) << two.status().ToString();
  std::filesystem::remove_all(dir);
}

TEST(ChildArgsTest, TheProjectorFollowsTheModel) {
  ChildLauncherOptions o;
  ModelSpec s;
  s.id = "g3";
  s.path = "/m/g3/g3.gguf";
  s.mmproj = "/m/g3/mmproj-g3.gguf";
  const std::vector<std::string> args = ChildArgs(o, s);
  ASSERT_GE(args.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(args.begin(), args.begin() + 5),
            (std::vector<std::string>{"serve", "-m", "/m/g3/g3.gguf", "--mmproj",
                                      "/m/g3/mmproj-g3.gguf"}));
  s.mmproj.clear();
  for (const std::string& a : ChildArgs(o, s)) EXPECT_NE(a, "--mmproj");
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
