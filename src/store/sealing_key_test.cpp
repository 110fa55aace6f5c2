// Loading the sealed records' key: which source wins, what a key file may hold, and every way a
// key file inside the cache dir is refused (directly, through "..", through a symlink either
// way), with errors that name the file.
#include "store/sealing_key.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "store/sealed_store.h"
#include "store/store_test_util.h"

namespace prefixd::store {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string Raw(char first) {
  std::string s;
  for (int i = 0; i < 32; ++i) s.push_back(char(first + i));
  return s;
}

std::string Write(const std::string& path, const std::string& bytes, unsigned mode = 0600) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
  ::chmod(path.c_str(), mode);
  return path;
}

std::string Hex(const std::string& bytes, const char* digits = "0123456789abcdef") {
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

SealingKeySources Flag(std::string path) {
  SealingKeySources s;
  s.key_file = std::move(path);
  return s;
}
SealingKeySources EnvFile(std::string path) {
  SealingKeySources s;
  s.env_key_file = std::move(path);
  return s;
}
SealingKeySources EnvHex(std::string hex) {
  SealingKeySources s;
  s.env_key_hex = std::move(hex);
  return s;
}
SealingKeySources Creds(std::string dir) {
  SealingKeySources s;
  s.credentials_dir = std::move(dir);
  return s;
}

bool IsInvalid(const Status& st) { return st.code() == Status::Code::kInvalidArgument; }

AeadKey Expected(const std::string& material) { return *HkdfAeadKey(material, "", kSealingKeyInfo); }

class SealingKeyTest : public ::testing::Test {
 protected:
  Result<SealingKey> Load(const SealingKeySources& s) {
    return LoadSealingKey(Env::Default(), s, cache_);
  }
  Status LoadFile(const std::string& path) { return Load(Flag(path)).status(); }

  TempDir dir_;
  const std::string cache_ = dir_.Sub("cache");
  const std::string outside_ = dir_.Sub("keys");
};

TEST_F(SealingKeyTest, TheFlagThenTheFileVariableThenTheHexVariableThenTheCredential) {
  const std::string flag = Write(outside_ + "/flag", Raw('a'));
  const std::string env_file = Write(outside_ + "/env", Raw('b'));
  const std::string creds = outside_ + "/creds";
  Write(creds + "/prefixd-cache-key", Raw('d'));
  const std::string hex_key = Hex(Raw('c'));

  SealingKeySources all{flag, env_file, hex_key, creds};
  auto k = Load(all);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->key, Expected(Raw('a')));
  EXPECT_EQ(k->source, "--cache-key-file " + flag);

  all.key_file.clear();
  k = Load(all);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->key, Expected(Raw('b')));
  EXPECT_EQ(k->source, "PREFIXD_CACHE_KEY_FILE " + env_file);

  all.env_key_file.clear();
  k = Load(all);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->key, Expected(Raw('c'))) << "the hex variable decodes to its bytes";
  EXPECT_EQ(k->source, "PREFIXD_CACHE_KEY");

  all.env_key_hex.clear();
  k = Load(all);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->key, Expected(Raw('d')));
  EXPECT_EQ(k->source, "the systemd credential " + creds + "/prefixd-cache-key");
}

TEST_F(SealingKeyTest, NoSourceNamesEveryWayToGiveOne) {
  // A credentials directory without our credential is no source (other services' are there).
  fs::create_directories(outside_ + "/creds");
  auto k = Load(Creds(outside_ + "/creds"));
  ASSERT_TRUE(IsInvalid(k.status())) << k.status().ToString();
  for (const char* way : {"--cache-key-file", "PREFIXD_CACHE_KEY_FILE", "PREFIXD_CACHE_KEY=",
                          "prefixd-cache-key", "head -c 32 /dev/urandom"}) {
    EXPECT_NE(k.status().message().find(way), std::string::npos) << way << " in: " << k.status().ToString();
  }
  EXPECT_FALSE(fs::exists(cache_)) << "nothing is created, in the cache dir or anywhere";
}

TEST_F(SealingKeyTest, RawAndHexFilesGiveTheSameKey) {
  const std::string hex = Hex(Raw('A'), "0123456789ABCDEF");
  auto raw = Load(Flag(Write(outside_ + "/raw", Raw('A'))));
  auto text = Load(Flag(Write(outside_ + "/hex", "  " + hex + "\n")));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(raw->key, text->key);
  EXPECT_EQ(raw->key, Expected(Raw('A')));
  // Longer material is used whole.
  auto longer = Load(Flag(Write(outside_ + "/long", Raw('A') + Raw('a'))));
  ASSERT_TRUE(longer.ok());
  EXPECT_NE(longer->key, raw->key);
}

TEST_F(SealingKeyTest, ShortRepeatedOrOddMaterialIsRefusedByName) {
  const auto refused = [&](const std::string& name, const std::string& bytes, const char* why) {
    const Status st = LoadFile(Write(outside_ + "/" + name, bytes));
    EXPECT_TRUE(IsInvalid(st)) << name << ": " << st.ToString();
    EXPECT_NE(st.message().find(outside_ + "/" + name), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(why), std::string::npos) << st.ToString();
  };
  refused("short", Raw('a').substr(0, 31), "holds 31 bytes");
  refused("empty", "", "holds 0 bytes");
  refused("short-hex", std::string(62, 'a').replace(0, 1, "b") + "\n", "holds 62 hex digits");
  refused("odd-hex", std::string(65, 'a').replace(0, 1, "b"), "holds 65 hex digits");
  refused("zeros", std::string(32, '\0'), "one byte repeated");
  refused("zero-hex", std::string(64, '0'), "one byte repeated");
  refused("huge", std::string(kMaxSealingKeyFileBytes + 1, 'x'), "is it the right file");
  EXPECT_TRUE(IsInvalid(Load(EnvHex("not hex at all")).status()));
  EXPECT_TRUE(IsInvalid(Load(EnvHex(std::string(40, 'a'))).status()));
}

TEST_F(SealingKeyTest, AMissingFileOrADirectoryIsAClearError) {
  const Status missing = LoadFile(outside_ + "/nope");
  EXPECT_TRUE(missing.IsNotFound()) << missing.ToString();
  EXPECT_NE(missing.message().find("--cache-key-file " + outside_ + "/nope"), std::string::npos);
  fs::create_directories(outside_ + "/adir");
  EXPECT_TRUE(IsInvalid(LoadFile(outside_ + "/adir")));
  const Status env = Load(EnvFile(outside_ + "/nope")).status();
  EXPECT_NE(env.message().find("PREFIXD_CACHE_KEY_FILE"), std::string::npos) << env.ToString();
}

TEST_F(SealingKeyTest, AFileOthersMayReadOrWriteIsRefused) {
  for (unsigned mode : {0644u, 0640u, 0604u, 0620u, 0602u}) {
    const Status st = LoadFile(Write(outside_ + "/open", Raw('a'), mode));
    EXPECT_TRUE(IsInvalid(st)) << std::oct << mode << ": " << st.ToString();
    EXPECT_NE(st.message().find("chmod 600"), std::string::npos) << st.ToString();
  }
  EXPECT_TRUE(LoadFile(Write(outside_ + "/owner", Raw('a'), 0600)).ok());
  EXPECT_TRUE(LoadFile(Write(outside_ + "/readonly", Raw('a'), 0400)).ok());
}

TEST_F(SealingKeyTest, AKeyFileInsideTheCacheDirIsRefusedHoweverItIsNamed) {
  const std::string inside = Write(cache_ + "/sub/key", Raw('a'));
  fs::create_directories(outside_);
  fs::create_symlink(inside, outside_ + "/link-to-inside");
  fs::create_symlink(cache_, outside_ + "/cache-link");
  fs::create_symlink(cache_ + "/sub", outside_ + "/into-sub");  // into-sub/.. is the cache dir
  const std::string real_outside = Write(outside_ + "/real", Raw('b'));
  fs::create_symlink(real_outside, cache_ + "/link-to-outside");
  for (const std::string& path : {inside, cache_ + "/sub/../sub/key",
                                  outside_ + "/../cache/sub/key",
                                  outside_ + "/link-to-inside", outside_ + "/cache-link/sub/key",
                                  outside_ + "/into-sub/../sub/key", cache_ + "/link-to-outside"}) {
    const Status st = LoadFile(path);
    EXPECT_TRUE(IsInvalid(st)) << path << ": " << st.ToString();
    EXPECT_NE(st.message().find("inside the cache dir"), std::string::npos) << st.ToString();
  }
  // The cache dir named through a symlink, or with a trailing '/', is the same dir.
  EXPECT_TRUE(PathIsInside(inside, outside_ + "/cache-link"));
  EXPECT_TRUE(PathIsInside(inside, cache_ + "/"));
  EXPECT_TRUE(PathIsInside(cache_, cache_));
  // A sibling whose name begins with the cache dir's is outside it.
  EXPECT_FALSE(PathIsInside(dir_.Sub("cache-keys/key"), cache_));
  EXPECT_TRUE(LoadFile(real_outside).ok());
  // A cache dir that does not exist yet still has an inside.
  EXPECT_TRUE(PathIsInside(dir_.Sub("later/key"), dir_.Sub("later")));
}

TEST_F(SealingKeyTest, RecordsSealedUnderTheOldSchemeDoNotOpen) {
  // The scheme before: HMAC-SHA256 of <cache dir>/server-secret with the v1 purpose.
  const std::string secret = Raw('s');
  const AeadKey old_key = DeriveAeadKey(secret, "prefixd cache records v1");
  RecordMeta meta;
  meta.tokens = {1, 2, 3};
  auto sealed = SealRecord(old_key, meta, std::vector<uint8_t>{4, 5, 6});
  ASSERT_TRUE(sealed.ok());
  Record record{sealed->meta, sealed->payload};
  ASSERT_TRUE(UnsealRecord(old_key, record).ok());
  auto k = Load(Flag(Write(outside_ + "/same-bytes", secret)));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_TRUE(UnsealRecord(k->key, record).status().IsCorruption())
      << "even the same bytes as a key file derive another key";
}

}  // namespace
}  // namespace prefixd::store
