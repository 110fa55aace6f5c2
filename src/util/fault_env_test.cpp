#include "util/fault_env.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace prefixd {
namespace {

class FaultEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "prefixd-env-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string P(const std::string& name) const { return JoinPath(dir_, name); }
  void Write(Env* env, const std::string& name, const std::string& data, bool sync) {
    auto f = env->NewWritableFile(P(name));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append(data).ok());
    if (sync) ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  std::string Read(const std::string& name) {
    auto d = Env::Default()->ReadFile(P(name));
    return d.ok() ? std::string(d->begin(), d->end()) : "<" + d.status().ToString() + ">";
  }

  std::string dir_;
  FaultEnv env_;
};

TEST_F(FaultEnvTest, PosixBasics) {
  Env* env = Env::Default();
  Write(env, "a", "hello", true);
  EXPECT_EQ(Read("a"), "hello");
  EXPECT_EQ(*env->FileSize(P("a")), 5u);
  ASSERT_TRUE(env->Rename(P("a"), P("b")).ok());
  EXPECT_FALSE(env->FileExists(P("a")));
  auto names = env->ListDir(dir_);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"b"});
  EXPECT_TRUE(env->RemoveFile(P("a")).IsNotFound());
  EXPECT_TRUE(env->NewRandomAccessFile(P("a")).status().IsNotFound());
  ASSERT_TRUE(env->WriteFileAtomic(P("c"), std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>("xyz"), 3)).ok());
  EXPECT_EQ(Read("c"), "xyz");
  EXPECT_FALSE(env->FileExists(P("c.tmp")));
  EXPECT_TRUE(env->SyncDir(dir_).ok());
  EXPECT_TRUE(env->CreateDir(P("d")).ok());
  EXPECT_TRUE(env->CreateDir(P("d")).ok());
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
}

TEST_F(FaultEnvTest, PowerCutDropsUnsyncedDataAndUnsyncedEntries) {
  Write(&env_, "synced", "durable", true);
  ASSERT_TRUE(env_.SyncDir(dir_).ok());
  {
    auto f = env_.NewAppendableFile(P("synced"));
    ASSERT_TRUE((*f)->Append(std::string_view("+lost")).ok());
  }
  Write(&env_, "nodirsync", "data", true);  // file synced, its entry not
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Read("synced"), "durable");
  EXPECT_FALSE(Env::Default()->FileExists(P("nodirsync")));
}

TEST_F(FaultEnvTest, PowerCutUndoesAnUnsyncedRenameAndRestoresTheReplacedFile) {
  Write(&env_, "target", "old", true);
  ASSERT_TRUE(env_.SyncDir(dir_).ok());
  Write(&env_, "target.tmp", "new", true);
  ASSERT_TRUE(env_.Rename(P("target.tmp"), P("target")).ok());
  EXPECT_EQ(Read("target"), "new");
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Read("target"), "old");
  EXPECT_FALSE(Env::Default()->FileExists(P("target.tmp")));
  // With the dir sync the rename survives.
  Write(&env_, "target.tmp", "new", true);
  ASSERT_TRUE(env_.Rename(P("target.tmp"), P("target")).ok());
  ASSERT_TRUE(env_.SyncDir(dir_).ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Read("target"), "new");
}

TEST_F(FaultEnvTest, CrashAfterOpsFailsEverythingAfter) {
  env_.CrashAfterOps(2);
  auto f = env_.NewWritableFile(P("x"));  // op 1
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)->Append(std::string_view("a")).ok());  // op 2
  EXPECT_FALSE((*f)->Append(std::string_view("b")).ok());
  EXPECT_TRUE(env_.crashed());
  EXPECT_FALSE(env_.RemoveFile(P("x")).ok());
  EXPECT_FALSE(env_.NewRandomAccessFile(P("x")).ok());
  EXPECT_EQ(Read("x"), "a");
  env_.ResetFaults();
  EXPECT_FALSE(env_.crashed());
}

TEST_F(FaultEnvTest, NoSpaceWritesWhatFits) {
  env_.SetNoSpaceAfterBytes(4);
  auto f = env_.NewWritableFile(P("x"));
  Status st = (*f)->Append(std::string_view("abcdef"));
  EXPECT_EQ(st.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(st.message().find("No space"), std::string::npos);
  (*f)->Close();
  EXPECT_EQ(Read("x"), "abcd");
}

TEST_F(FaultEnvTest, ReadOnlyAndNthOpAndBitFlip) {
  Write(&env_, "x", "abc", true);
  env_.SetReadOnly(true);
  EXPECT_FALSE(env_.NewWritableFile(P("y")).ok());
  EXPECT_FALSE(env_.RemoveFile(P("x")).ok());
  EXPECT_TRUE(env_.ReadFile(P("x")).ok());
  env_.SetReadOnly(false);
  env_.FailNthOp(FaultEnv::Op::kRename, 2);
  Write(&env_, "y", "1", false);
  EXPECT_TRUE(env_.Rename(P("y"), P("z")).ok());
  EXPECT_FALSE(env_.Rename(P("z"), P("y")).ok());
  EXPECT_TRUE(env_.Rename(P("z"), P("y")).ok());
  env_.SetReadBitFlip("/x", 1);
  auto d = env_.ReadFile(P("x"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(std::string(d->begin(), d->end()), "acc");
}

// Preload waits until the range is in the page cache (the disk tier's opened records).
TEST_F(FaultEnvTest, PreloadBringsARangeIntoThePageCache) {
  const std::string data(size_t(4) << 20, 'p');
  Write(Env::Default(), "big", data, true);
  const int fd = ::open(P("big").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // drops the clean pages, if the kernel will
  auto resident_pages = [&] {
    void* p = ::mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
    std::vector<unsigned char> v(data.size() / 4096);
    size_t n = 0;
    if (p != MAP_FAILED && ::mincore(p, data.size(), v.data()) == 0) {
      for (unsigned char c : v) n += c & 1;
    }
    if (p != MAP_FAILED) ::munmap(p, data.size());
    return n;
  };
  const size_t before = resident_pages();
  auto file = Env::Default()->NewRandomAccessFile(P("big"));
  ASSERT_TRUE(file.ok());
  (*file)->Preload(4096, data.size() - 4096);
  EXPECT_GE(resident_pages(), data.size() / 4096 - 1) << before << " pages were resident before";
  ::close(fd);
}

}  // namespace
}  // namespace prefixd
