#include "util/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>

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

}  // namespace
}  // namespace prefixd
