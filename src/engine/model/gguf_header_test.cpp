#include "engine/model/gguf_header.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gguf.h"

namespace prefixd::engine {
namespace {

std::string TempPath(const std::string& name) {
  return testing::TempDir() + "/gguf_header_" + std::to_string(getpid()) + "_" + name;
}

// A GGUF of metadata only, as gguf's own writer makes it.
std::string WriteGguf(const std::string& name, const char* arch, int64_t n_ctx, bool as_u64) {
  gguf_context* gguf = gguf_init_empty();
  if (arch != nullptr) {
    gguf_set_val_str(gguf, "general.architecture", arch);
    const std::string key = std::string(arch) + ".context_length";
    if (as_u64) {
      gguf_set_val_u64(gguf, key.c_str(), uint64_t(n_ctx));
    } else if (n_ctx > 0) {
      gguf_set_val_u32(gguf, key.c_str(), uint32_t(n_ctx));
    }
  }
  const std::string path = TempPath(name);
  EXPECT_TRUE(gguf_write_to_file(gguf, path.c_str(), /*only_meta=*/false));
  gguf_free(gguf);
  return path;
}

TEST(GgufHeaderTest, ReadsTheArchAndTrainedContext) {
  const std::string path = WriteGguf("llama.gguf", "llama", 131072, false);
  auto h = ReadGgufHeader(path);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->arch, "llama");
  EXPECT_EQ(h->n_ctx_train, 131072);
  std::remove(path.c_str());
}

TEST(GgufHeaderTest, AnyIntegerTypeAndAMissingLength) {
  const std::string wide = WriteGguf("wide.gguf", "qwen35", 262144, true);
  EXPECT_EQ(ReadGgufHeader(wide)->n_ctx_train, 262144);
  const std::string none = WriteGguf("none.gguf", "gemma3", 0, false);
  auto h = ReadGgufHeader(none);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->n_ctx_train, 0);
  std::remove(wide.c_str());
  std::remove(none.c_str());
}

TEST(GgufHeaderTest, NotAGgufOrNoArchIsAnError) {
  const std::string junk = TempPath("junk.gguf");
  std::FILE* f = std::fopen(junk.c_str(), "wb");
  std::fputs("not a gguf file at all, just text", f);
  std::fclose(f);
  auto bad = ReadGgufHeader(junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kIOError);
  EXPECT_FALSE(ReadGgufHeader(TempPath("absent.gguf")).ok());
  const std::string no_arch = WriteGguf("noarch.gguf", nullptr, 0, false);
  auto anon = ReadGgufHeader(no_arch);
  ASSERT_FALSE(anon.ok());
  EXPECT_EQ(anon.status().code(), Status::Code::kCorruption);
  std::remove(junk.c_str());
  std::remove(no_arch.c_str());
}

}  // namespace
}  // namespace prefixd::engine
