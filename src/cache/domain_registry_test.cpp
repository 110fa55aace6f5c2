#include "cache/domain_registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace prefixd::cache {
namespace {

namespace fs = std::filesystem;

TEST(DomainRegistryTest, RemembersAndListsDomains) {
  fs::path dir = fs::temp_directory_path() / ("prefixd-domains-" + std::to_string(getpid()));
  fs::remove_all(dir);
  DomainInfo a{Sha256Of("a"), Sha256Of("model"), Sha256Of("layout"), "/models/m.gguf"};
  DomainInfo b{Sha256Of("b"), Sha256Of("model"), Sha256Of("layout2"), "/models/m.gguf"};
  ASSERT_TRUE(RememberDomain(dir.string(), a).ok());
  ASSERT_TRUE(RememberDomain(dir.string(), b).ok());
  ASSERT_TRUE(RememberDomain(dir.string(), a).ok());  // once is enough
  std::ofstream(dir / "domains" / "not-a-domain") << "junk";
  std::ofstream(dir / "domains" / DigestHex(Sha256Of("c"))) << "model_fingerprint zz\n";
  auto list = ListDomains(dir.string());
  ASSERT_EQ(list.size(), 2u);  // the junk and the half-written file are ignored
  for (const DomainInfo& d : list) {
    EXPECT_TRUE(d.domain == a.domain || d.domain == b.domain);
    EXPECT_EQ(d.model_fingerprint, a.model_fingerprint);
    EXPECT_EQ(d.model_path, "/models/m.gguf");
  }
  fs::remove_all(dir);
}

TEST(DomainRegistryTest, ParsesOnlyFullLowerCaseHex) {
  Digest d{};
  EXPECT_TRUE(ParseDigestHex(DigestHex(Sha256Of("x")), &d));
  EXPECT_EQ(d, Sha256Of("x"));
  EXPECT_FALSE(ParseDigestHex("abc", &d));
  EXPECT_FALSE(ParseDigestHex(std::string(64, 'G'), &d));
}

}  // namespace
}  // namespace prefixd::cache
