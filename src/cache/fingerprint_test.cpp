#include "cache/fingerprint.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace prefixd::cache {
namespace {

class FingerprintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/prefixd_fp_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    model_ = dir_ + "/model.gguf";
    memo_path_ = dir_ + "/fingerprints.tsv";
    Write(model_, "weights-v1");
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  }
  // Rewrites the content keeping size and mtime: the identity stays, so the memo is trusted.
  void RewriteKeepingIdentity(const std::string& text) {
    struct stat st;
    ASSERT_EQ(stat(model_.c_str(), &st), 0);
    Write(model_, text);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(utimensat(AT_FDCWD, model_.c_str(), times, 0), 0);
  }

  std::string dir_, model_, memo_path_;
};

TEST_F(FingerprintTest, HashesContent) {
  FingerprintMemo memo(memo_path_);
  auto d = FileFingerprint(model_, memo);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, Sha256Of("weights-v1"));
  EXPECT_EQ(memo.size(), 1u);
}

TEST_F(FingerprintTest, MemoSurvivesRestartAndSkipsRehash) {
  Digest first;
  {
    FingerprintMemo memo(memo_path_);
    first = FileFingerprint(model_, memo).value();
  }
  RewriteKeepingIdentity("weights-v2");  // same length, same mtime
  FingerprintMemo memo(memo_path_);
  auto d = FileFingerprint(model_, memo);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, first) << "the memo should have answered without reading the file";
}

TEST_F(FingerprintTest, ChangedFileIsRehashed) {
  FingerprintMemo memo(memo_path_);
  Digest first = FileFingerprint(model_, memo).value();
  Write(model_, "weights-version-2");  // new size
  auto d = FileFingerprint(model_, memo);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(*d, first);
  EXPECT_EQ(*d, Sha256Of("weights-version-2"));
}

TEST_F(FingerprintTest, CorruptMemoLineIsDroppedNotTrusted) {
  {
    FingerprintMemo memo(memo_path_);
    ASSERT_TRUE(FileFingerprint(model_, memo).ok());
  }
  std::ifstream in(memo_path_);
  std::string header, record;
  std::getline(in, header);
  std::getline(in, record);
  in.close();
  record[record.find('\t') - 1] ^= 1;  // flip a digit of the device number
  Write(memo_path_, header + "\n" + record + "\ngarbage\n");
  FingerprintMemo memo(memo_path_);
  ASSERT_TRUE(memo.Load().ok());
  EXPECT_EQ(memo.size(), 0u);
  EXPECT_EQ(memo.dropped_lines(), 2u);
}

TEST_F(FingerprintTest, MissingFileIsAnIOError) {
  FingerprintMemo memo(memo_path_);
  auto d = FileFingerprint(dir_ + "/nope.gguf", memo);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kIOError);
}

}  // namespace
}  // namespace prefixd::cache
