// SealedStore over a real DiskStore: what lands in the files holds neither tokens nor payload,
// reads back whole through the key, and nothing that is not sealed under it is ever served.
#include "store/sealed_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "store/record.h"
#include "store/store_test_util.h"
#include "util/coding.h"

namespace prefixd::store {
namespace {

using testing::MetaFor;
using testing::OpenStore;
using testing::PayloadFor;
using testing::PayloadPtr;
using testing::TempDir;

std::vector<uint8_t> FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> TokenBytes(const RecordMeta& m) {
  std::vector<uint8_t> out;
  for (int32_t t : m.tokens) PutFixed32(&out, uint32_t(t));
  return out;
}

bool Contains(const std::vector<uint8_t>& hay, const std::vector<uint8_t>& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

std::string FileOf(const std::string& dir, const RecordMeta& m) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename() == RecordFileName(IdOf(m))) return e.path().string();
  }
  return "";
}

class SealedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = OpenStore(dir_.path());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    disk_ = std::move(s).value();
    sealed_ = std::make_unique<SealedStore>(*disk_, key_);
  }

  TempDir dir_;
  const AeadKey key_ = DeriveAeadKey("server secret", "prefixd cache records v1");
  std::unique_ptr<DiskStore> disk_;
  std::unique_ptr<SealedStore> sealed_;
};

TEST_F(SealedStoreTest, FilesHoldNoTokensNorPayloadAndReadBackWhole) {
  const RecordMeta meta = MetaFor(7, 0, RecordKind::kTail, 40);
  const std::vector<uint8_t> payload = PayloadFor(7, 4096);
  ASSERT_TRUE(sealed_->PutAsync(meta, PayloadPtr(7, 4096)));
  disk_->Flush();

  const std::vector<uint8_t> file = FileBytes(FileOf(dir_.path(), meta));
  ASSERT_FALSE(file.empty());
  EXPECT_FALSE(Contains(file, TokenBytes(meta))) << "the tokens are not in the clear";
  EXPECT_FALSE(Contains(file, std::vector<uint8_t>(payload.begin(), payload.begin() + 64)));

  auto raw = disk_->Read(meta.key, meta.kind);
  ASSERT_TRUE(raw.ok());
  EXPECT_TRUE(raw->meta.sealed);
  EXPECT_TRUE(raw->meta.tokens.empty());
  EXPECT_EQ(raw->meta.position, meta.position) << "where it sits in its tree stays readable";

  auto rec = sealed_->Read(meta.key, meta.kind);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_FALSE(rec->meta.sealed);
  EXPECT_EQ(rec->meta.tokens, meta.tokens);
  EXPECT_EQ(rec->payload, payload);
  EXPECT_TRUE(sealed_->OpenRecord(meta.key, meta.kind).status().code() == Status::Code::kNotSupported);
}

TEST_F(SealedStoreTest, RefusesAndDropsPlainRecordsAndRecordsOfAnotherKey) {
  const RecordMeta plain = MetaFor(1);
  ASSERT_TRUE(disk_->PutAsync(plain, PayloadPtr(1, 256)));  // planted beside the sealing
  SealedStore other(*disk_, DeriveAeadKey("another secret", "prefixd cache records v1"));
  const RecordMeta foreign = MetaFor(2);
  ASSERT_TRUE(other.PutAsync(foreign, PayloadPtr(2, 256)));
  disk_->Flush();

  EXPECT_TRUE(sealed_->Read(plain.key, plain.kind).status().IsCorruption());
  EXPECT_TRUE(sealed_->Read(foreign.key, foreign.kind).status().IsCorruption());
  EXPECT_EQ(sealed_->refused(), 2u);
  disk_->Flush();
  EXPECT_FALSE(disk_->Contains(plain.key, plain.kind)) << "a refused record is dropped";
  EXPECT_FALSE(disk_->Contains(foreign.key, foreign.kind));
}

TEST_F(SealedStoreTest, ASealedPayloadMovedToAnotherIdentityOrChangedDoesNotVerify) {
  const RecordMeta meta = MetaFor(3, 0, RecordKind::kBlockRows, 32);
  ASSERT_TRUE(sealed_->PutAsync(meta, PayloadPtr(3, 512)));
  disk_->Flush();
  auto raw = disk_->Read(meta.key, meta.kind);
  ASSERT_TRUE(raw.ok());

  // The same sealed bytes under another key (position, parent): a valid file, CRCs and all.
  RecordMeta moved = raw->meta;
  moved.key = MetaFor(4).key;
  moved.position += 32;
  ASSERT_TRUE(disk_->PutAsync(moved, std::make_shared<const std::vector<uint8_t>>(raw->payload)));
  // One byte changed, the CRC computed again: what a CRC alone would let through.
  RecordMeta changed = raw->meta;
  changed.key = MetaFor(5).key;
  std::vector<uint8_t> flipped = raw->payload;
  flipped[flipped.size() / 2] ^= 0x80;
  ASSERT_TRUE(disk_->PutAsync(changed, std::make_shared<const std::vector<uint8_t>>(flipped)));
  disk_->Flush();

  EXPECT_TRUE(sealed_->Read(moved.key, moved.kind).status().IsCorruption());
  EXPECT_TRUE(sealed_->Read(changed.key, changed.kind).status().IsCorruption());
  EXPECT_TRUE(sealed_->Read(meta.key, meta.kind).ok()) << "the original still verifies";
}

TEST(SealedRecord, HeaderKeepsTheSealedFlagAndRefusesUnknownFlags) {
  RecordMeta m = MetaFor(9);
  m.tokens.clear();
  m.sealed = true;
  std::vector<uint8_t> body;
  AppendHeaderBody(m, 123, &body);
  uint64_t created = 0;
  auto back = DecodeHeaderBody(body, &created);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->sealed);
  body[98] = 0x02;  // a flag this reader does not know
  EXPECT_TRUE(DecodeHeaderBody(body, &created).status().IsCorruption());
}

}  // namespace
}  // namespace prefixd::store
