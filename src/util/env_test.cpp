#include "util/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace prefixd {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// Files and directories the Env creates are the owner's alone, under the usual umask 022 (or
// none at all): record files, index logs, locks and the server secret hold prompts' tokens.
TEST(PosixEnvTest, CreatesPrivateFilesAndDirectories) {
  const mode_t old_umask = ::umask(0);
  char tmpl[] = "/tmp/prefixd-env-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  Env* env = Env::Default();
  const std::string dir = root + "/cache";
  ASSERT_TRUE(env->CreateDir(dir).ok());
  EXPECT_EQ(ModeOf(dir), 0700u);
  const uint8_t bytes[] = {1, 2, 3};
  ASSERT_TRUE(env->WriteFileAtomic(dir + "/secret", bytes).ok());
  EXPECT_EQ(ModeOf(dir + "/secret"), 0600u);
  auto f = env->NewWritableFile(dir + "/record");
  ASSERT_TRUE(f.ok());
  f->reset();
  EXPECT_EQ(ModeOf(dir + "/record"), 0600u);
  auto lock = env->LockFile(dir + "/LOCK", "the cache");
  ASSERT_TRUE(lock.ok());
  EXPECT_EQ(ModeOf(dir + "/LOCK"), 0600u);
  lock->reset();
  ASSERT_TRUE(env->CreateDirs(dir + "/a/b").ok());
  EXPECT_EQ(ModeOf(dir + "/a"), 0700u);
  EXPECT_EQ(ModeOf(dir + "/a/b"), 0700u);
  EXPECT_TRUE(env->CreateDirs(dir + "/a/b").ok()) << "existing directories are no error";
  ASSERT_TRUE(env->RemoveDir(dir + "/a/b").ok());
  ASSERT_TRUE(env->RemoveDir(dir + "/a").ok());
  ::umask(old_umask);
  for (const char* name : {"/secret", "/record", "/LOCK"}) ASSERT_TRUE(env->RemoveFile(dir + name).ok());
  ASSERT_TRUE(env->RemoveDir(dir).ok());
  ASSERT_TRUE(env->RemoveDir(root).ok());
}


std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 131 + (i >> 12));
  return v;
}

// The uncached file holds exactly what was appended, whatever the pieces and however they fall
// on its staging buffer and blocks: a Sync in the middle of a block, more appends after it.
TEST(PosixEnvTest, UncachedFileHoldsExactlyWhatWasAppended) {
  char tmpl[] = "/tmp/prefixd-env-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  Env* env = Env::Default();
  for (size_t n : {size_t(0), size_t(1), size_t(4095), size_t(4096), size_t(4097),
                   size_t(1) << 20, (size_t(1) << 20) + 4097, size_t(3 << 20) + 5}) {
    const std::string path = root + "/f" + std::to_string(n);
    const std::vector<uint8_t> want = Pattern(n);
    auto f = env->NewUncachedWritableFile(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const size_t cuts[] = {0, n / 7, n / 3, n / 2, n - n / 5, n};
    for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
      ASSERT_TRUE((*f)->Append(std::span(want).subspan(cuts[i], cuts[i + 1] - cuts[i])).ok());
      if (i == 2) ASSERT_TRUE((*f)->Sync().ok());
    }
    ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Close().ok());
    auto size = env->FileSize(path);
    ASSERT_TRUE(size.ok());
    EXPECT_EQ(*size, n);
    auto got = env->ReadFile(path);
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(*got == want) << n << " bytes";
  }
  std::filesystem::remove_all(root);
}

// How many of a file's pages the page cache holds.
size_t ResidentPages(const std::string& path, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  EXPECT_NE(p, MAP_FAILED);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((n + page - 1) / page);
  EXPECT_EQ(::mincore(p, n, resident.data()), 0);
  ::munmap(p, n);
  ::close(fd);
  return size_t(std::count_if(resident.begin(), resident.end(), [](unsigned char c) { return c & 1; }));
}

// What the uncached file writes does not land in the page cache, where the file system allows
// direct I/O; what NewWritableFile writes does.
TEST(PosixEnvTest, UncachedFileBypassesThePageCache) {
  char tmpl[] = "/tmp/prefixd-env-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const int probe = ::open((root + "/probe").c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0600);
  if (probe < 0) GTEST_SKIP() << root << " refuses O_DIRECT";
  ::close(probe);
  Env* env = Env::Default();
  const size_t n = size_t(8) << 20;
  const std::vector<uint8_t> data = Pattern(n);
  for (bool uncached : {false, true}) {
    const std::string path = root + (uncached ? "/uncached" : "/cached");
    auto f = uncached ? env->NewUncachedWritableFile(path) : env->NewWritableFile(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append(data).ok());
    ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Close().ok());
    const size_t pages = n / size_t(::sysconf(_SC_PAGESIZE));
    const size_t resident = ResidentPages(path, n);
    if (uncached) {
      EXPECT_LE(resident, pages / 100) << "direct writes left pages in the cache";
    } else {
      EXPECT_GE(resident, pages / 2) << "buffered writes should fill the cache";
    }
  }
  std::filesystem::remove_all(root);
}
}  // namespace
}  // namespace prefixd
