#include "store/record.h"

#include <gtest/gtest.h>

#include "store/index_log.h"
#include "util/coding.h"
#include "store/store_test_util.h"

namespace prefixd::store {
namespace {

std::vector<uint8_t> WholeFile(const RecordMeta& meta, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> f = EncodeRecordFront(meta, 1234);
  f.insert(f.end(), payload.begin(), payload.end());
  uint32_t crc = PayloadCrc(payload.size(), payload);
  PutFixed32(&f, crc);
  return f;
}

TEST(RecordFormat, FrontRoundTrip) {
  RecordMeta m = testing::MetaFor(5, 1, RecordKind::kTail, 7);
  m.payload_bytes = 33;
  std::vector<uint8_t> file = WholeFile(m, testing::PayloadFor(5, 33));
  ASSERT_EQ(file.size(), RecordFileBytes(m));
  auto front = DecodeRecordFront(file, file.size());
  ASSERT_TRUE(front.ok()) << front.status().ToString();
  EXPECT_EQ(front->meta, m);
  EXPECT_EQ(front->created_ms, 1234u);
}

TEST(RecordFormat, EveryFlippedHeaderByteIsDetected) {
  RecordMeta m = testing::MetaFor(6, 0, RecordKind::kSnapshot, 4);
  m.payload_bytes = 10;
  std::vector<uint8_t> file = WholeFile(m, testing::PayloadFor(6, 10));
  const size_t front_bytes = kPrefixBytes + HeaderBodyBytes(4) + 12;
  for (size_t i = 0; i < front_bytes; ++i) {
    std::vector<uint8_t> bad = file;
    bad[i] ^= 0x04;
    auto front = DecodeRecordFront(bad, bad.size());
    EXPECT_FALSE(front.ok()) << "byte " << i;
  }
}

TEST(RecordFormat, DecoderNamesWhatIsWrong) {
  RecordMeta m = testing::MetaFor(1);
  m.payload_bytes = 0;
  std::vector<uint8_t> file = WholeFile(m, {});
  auto msg = [](std::vector<uint8_t> f, uint64_t size) {
    return DecodeRecordFront(f, size).status().ToString();
  };
  std::vector<uint8_t> bad = file;
  bad[0] = 'X';
  EXPECT_NE(msg(bad, bad.size()).find("bad magic"), std::string::npos);
  bad = file;
  bad[4] = 9;
  EXPECT_NE(msg(bad, bad.size()).find("unsupported record version 9"), std::string::npos);
  bad = file;
  bad[20] ^= 1;
  EXPECT_NE(msg(bad, bad.size()).find("header checksum mismatch"), std::string::npos);
  EXPECT_NE(msg(file, file.size() + 1).find("file size"), std::string::npos);
  EXPECT_NE(msg({file.begin(), file.begin() + 40}, file.size()).find("truncated header"),
            std::string::npos);
}

TEST(RecordFormat, WholeRecordInOneBufferRoundTripsAndNamesDamage) {
  RecordMeta m = testing::MetaFor(3);
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
  std::vector<uint8_t> bytes = EncodeRecord(m, 1234, payload);
  m.payload_bytes = payload.size();
  EXPECT_EQ(bytes, WholeFile(m, payload));
  auto rec = DecodeRecord(bytes);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->meta, m);
  EXPECT_EQ(rec->payload, payload);
  std::vector<uint8_t> bad = bytes;
  bad[bad.size() - 6] ^= 1;  // inside the payload
  EXPECT_NE(DecodeRecord(bad).status().ToString().find("payload checksum"), std::string::npos);
  bad.assign(bytes.begin(), bytes.end() - 1);
  EXPECT_NE(DecodeRecord(bad).status().ToString().find("file size"), std::string::npos);
  EXPECT_NE(DecodeRecord(std::vector<uint8_t>(5, 'x')).status().ToString().find("shorter"),
            std::string::npos);
}

TEST(RecordFormat, FileNames) {
  RecordId id{testing::MetaFor(2).key, RecordKind::kSnapshot};
  std::string name = RecordFileName(id);
  EXPECT_EQ(name.size(), 64u + 5);
  EXPECT_EQ(name.substr(65), "snap");
  auto parsed = ParseRecordFileName(name);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, id);
  EXPECT_FALSE(ParseRecordFileName(name + ".tmp").has_value());
  EXPECT_FALSE(ParseRecordFileName("LOCK").has_value());
  EXPECT_FALSE(ParseRecordFileName(name.substr(0, 65) + "blob").has_value());
}

TEST(IndexLog, ReplayAppliesAddRemoveTouchAndStopsAtATornTail) {
  testing::TempDir dir;
  const std::string path = dir.Sub("index.log");
  Env* env = Env::Default();
  std::vector<IndexEntry> entries(3);
  for (uint32_t i = 0; i < 3; ++i) {
    entries[i].meta = testing::MetaFor(i);
    entries[i].meta.payload_bytes = 10 * i;
    entries[i].meta.last_access_unix_ms = 100 + i;
    entries[i].file_bytes = RecordFileBytes(entries[i].meta);
    entries[i].created_ms = 50;
  }
  {
    auto log = IndexLog::Rewrite(env, path, {&entries[0], &entries[1]});
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    ASSERT_TRUE((*log)->AppendAdd(entries[2]).ok());
    ASSERT_TRUE((*log)->AppendRemove(IdOf(entries[0].meta)).ok());
    ASSERT_TRUE((*log)->AppendTouch(IdOf(entries[1].meta), 999).ok());
  }
  auto r = IndexLog::Replay(env, path);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->missing);
  EXPECT_EQ(r->torn_bytes, 0u);
  EXPECT_EQ(r->n_entries, 5u);
  ASSERT_EQ(r->entries.size(), 2u);
  EXPECT_EQ(r->entries.at(IdOf(entries[1].meta)).meta.last_access_unix_ms, 999u);
  EXPECT_EQ(r->entries.at(IdOf(entries[2].meta)).meta, entries[2].meta);
  // Cut the last entry in half: everything before it is kept.
  auto data = env->ReadFile(path);
  ASSERT_TRUE(env->WriteFileAtomic(path, std::span(*data).first(data->size() - 20)).ok());
  r = IndexLog::Replay(env, path);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->torn_bytes, 0u);
  EXPECT_NE(r->torn_reason.find("truncated entry"), std::string::npos) << r->torn_reason;
  EXPECT_EQ(r->entries.at(IdOf(entries[1].meta)).meta.last_access_unix_ms, 101u);
  auto missing = IndexLog::Replay(env, dir.Sub("nope"));
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->missing);
}

}  // namespace
}  // namespace prefixd::store
