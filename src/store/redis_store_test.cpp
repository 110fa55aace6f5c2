// The shared tier against a real redis-server (redis_test_server.h): round trips, garbage
// values, Redis down at start, killed and restarted, paused (slow), and evicting under a tiny
// maxmemory. Every wait is a bounded poll.
#include "store/redis_store.h"

#include <gtest/gtest.h>

#include <chrono>

#include "store/redis_link.h"
#include "store/redis_test_server.h"
#include "store/sealed_store.h"

namespace prefixd::store {
namespace {

using testing::Eventually;
using testing::MetaFor;
using testing::PayloadFor;
using testing::PayloadPtr;
using testing::RedisTestServer;

std::unique_ptr<RedisStore> OpenStore(const std::string& url, int command_timeout_ms = 1000) {
  RedisStoreOptions o;
  o.url = url;
  o.connect_timeout_ms = 200;
  o.command_timeout_ms = command_timeout_ms;
  auto s = RedisStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// Puts record `seed` and waits until the writer handled it.
void PutAndFlush(RedisStore& s, uint32_t seed, size_t bytes = 100) {
  s.PutAsync(MetaFor(seed), PayloadPtr(seed, bytes));
  s.Flush();
}

bool ReadsBack(RedisStore& s, uint32_t seed, size_t bytes = 100) {
  auto rec = s.Read(MetaFor(seed).key, RecordKind::kBlockRows);
  return rec.ok() && rec->meta.tokens == MetaFor(seed).tokens &&
         rec->payload == PayloadFor(seed, bytes);
}

TEST(RedisUrl, ParsesHostPortDbAndNamesWhatIsWrong) {
  auto a = ParseRedisUrl("redis://cache.internal:6380/3");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "cache.internal");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 3);
  EXPECT_EQ(a->ToString(), "redis://cache.internal:6380/3");
  auto d = ParseRedisUrl("redis://10.0.0.5");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 6379);
  EXPECT_EQ(d->db, 0);
  EXPECT_EQ(ParseRedisUrl("rediss://h:1").status().code(), Status::Code::kNotSupported);
  EXPECT_EQ(ParseRedisUrl("http://h:1").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseRedisUrl("redis://h:0").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseRedisUrl("redis://h:1/x").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseRedisUrl("redis://pw@h:1").status().code(), Status::Code::kInvalidArgument);
}

TEST(RedisStore, RecordsRoundTripInTheDiskFormatUnderTheirContentAddress) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url());
  PutAndFlush(*s, 1, 5000);
  PutAndFlush(*s, 2);
  EXPECT_TRUE(ReadsBack(*s, 1, 5000));
  EXPECT_TRUE(ReadsBack(*s, 2));
  const RecordId id1{MetaFor(1).key, RecordKind::kBlockRows};
  const RecordId absent{MetaFor(3).key, RecordKind::kBlockRows};
  const RecordId other_kind{MetaFor(1).key, RecordKind::kSnapshot};
  EXPECT_EQ(s->ContainsAll(std::vector<RecordId>{id1, absent, other_kind}),
            (std::vector<bool>{true, false, false}));
  // The value is a record file, byte for byte.
  const std::string value = redis.Command({"GET", RedisKey(id1)});
  auto rec = DecodeRecord({reinterpret_cast<const uint8_t*>(value.data()), value.size()});
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->payload, PayloadFor(1, 5000));
  EXPECT_EQ(RedisKey(id1).substr(0, 6), "pxd:1:");
  EXPECT_EQ(s->Read(absent.key, absent.kind).status().code(), Status::Code::kNotFound);
  RedisStoreStats st = s->GetStats();
  EXPECT_TRUE(st.up);
  EXPECT_EQ(st.puts_written, 2u);
  EXPECT_EQ(st.get_hits, 2u);
  EXPECT_EQ(st.get_not_found, 1u);
}

TEST(RedisStore, SealedRecordsShowRedisNeitherTokensNorPayload) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url());
  SealedStore sealed(*s, DeriveAeadKey("fleet secret", "prefixd cache records v1"));
  ASSERT_TRUE(sealed.PutAsync(MetaFor(1), PayloadPtr(1, 5000)));
  s->Flush();
  const RecordId id1{MetaFor(1).key, RecordKind::kBlockRows};
  const std::string value = redis.Command({"GET", RedisKey(id1)});
  auto rec = DecodeRecord({reinterpret_cast<const uint8_t*>(value.data()), value.size()});
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_TRUE(rec->meta.sealed);
  EXPECT_TRUE(rec->meta.tokens.empty());
  const std::vector<uint8_t> clear = PayloadFor(1, 5000);
  EXPECT_EQ(std::search(rec->payload.begin(), rec->payload.end(), clear.begin(), clear.begin() + 64),
            rec->payload.end());
  auto back = sealed.Read(id1.key, id1.kind);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->meta.tokens, MetaFor(1).tokens);
  EXPECT_EQ(back->payload, clear);
  // Another fleet's key opens nothing, and the record is dropped from Redis.
  SealedStore other(*s, DeriveAeadKey("another secret", "prefixd cache records v1"));
  EXPECT_TRUE(other.Read(id1.key, id1.kind).status().IsCorruption());
  EXPECT_TRUE(Eventually([&] { return redis.Command({"EXISTS", RedisKey(id1)}) == "0"; }));
}

TEST(RedisStore, GarbageIsACountedCleanMissAndIsDeleted) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url());
  PutAndFlush(*s, 1);
  PutAndFlush(*s, 2);
  const RecordId id1{MetaFor(1).key, RecordKind::kBlockRows};
  const RecordId id2{MetaFor(2).key, RecordKind::kBlockRows};
  std::string value = redis.Command({"GET", RedisKey(id1)});
  value[value.size() - 10] ^= 1;  // a payload byte
  ASSERT_EQ(redis.Command({"SET", RedisKey(id1), value}), "OK");
  auto bad = s->Read(id1.key, id1.kind);
  EXPECT_EQ(bad.status().code(), Status::Code::kCorruption);
  EXPECT_NE(bad.status().message().find("payload checksum"), std::string::npos);
  EXPECT_EQ(redis.Command({"EXISTS", RedisKey(id1)}), "0");  // deleted: never served again
  // A whole, valid record under another record's key is refused too.
  ASSERT_EQ(redis.Command({"SET", RedisKey(id2), redis.Command({"GET", RedisKey(id2)})}), "OK");
  PutAndFlush(*s, 3);
  const std::string third = redis.Command({"GET", RedisKey({MetaFor(3).key, id2.kind})});
  ASSERT_EQ(redis.Command({"SET", RedisKey(id2), third}), "OK");
  EXPECT_EQ(s->Read(id2.key, id2.kind).status().code(), Status::Code::kCorruption);
  ASSERT_EQ(redis.Command({"SET", RedisKey(id2), "not a record"}), "OK");
  EXPECT_EQ(s->Read(id2.key, id2.kind).status().code(), Status::Code::kCorruption);
  EXPECT_EQ(s->GetStats().get_corrupt, 3u);
  EXPECT_TRUE(ReadsBack(*s, 3));
}

// ReadAll answers each id as Read would, from one pipelined round trip: found, missing,
// damaged (deleted), and through the sealing decorator opened.
TEST(RedisStore, ReadAllAnswersEachRecordAsReadWould) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url());
  for (uint32_t seed : {1u, 2u, 3u}) PutAndFlush(*s, seed, 3000);
  const RecordId id1{MetaFor(1).key, RecordKind::kBlockRows};
  const RecordId id2{MetaFor(2).key, RecordKind::kBlockRows};
  const RecordId id3{MetaFor(3).key, RecordKind::kBlockRows};
  const RecordId absent{MetaFor(4).key, RecordKind::kBlockRows};
  std::string value = redis.Command({"GET", RedisKey(id3)});
  value[value.size() - 10] ^= 1;
  ASSERT_EQ(redis.Command({"SET", RedisKey(id3), value}), "OK");
  std::vector<Result<Record>> recs = s->ReadAll(std::vector<RecordId>{id1, absent, id2, id3});
  ASSERT_EQ(recs.size(), 4u);
  ASSERT_TRUE(recs[0].ok()) << recs[0].status().ToString();
  EXPECT_EQ(recs[0]->payload, PayloadFor(1, 3000));
  EXPECT_EQ(recs[1].status().code(), Status::Code::kNotFound);
  ASSERT_TRUE(recs[2].ok());
  EXPECT_EQ(recs[2]->meta.tokens, MetaFor(2).tokens);
  EXPECT_EQ(recs[3].status().code(), Status::Code::kCorruption);
  EXPECT_EQ(redis.Command({"EXISTS", RedisKey(id3)}), "0");
  EXPECT_TRUE(s->ReadAll({}).empty());

  SealedStore sealed(*s, DeriveAeadKey("fleet secret", "prefixd cache records v1"));
  ASSERT_TRUE(sealed.PutAsync(MetaFor(5), PayloadPtr(5, 2000)));
  s->Flush();
  const RecordId id5{MetaFor(5).key, RecordKind::kBlockRows};
  std::vector<Result<Record>> opened = sealed.ReadAll(std::vector<RecordId>{id5, id1});
  ASSERT_TRUE(opened[0].ok()) << opened[0].status().ToString();
  EXPECT_EQ(opened[0]->payload, PayloadFor(5, 2000));
  EXPECT_TRUE(opened[1].status().IsCorruption());  // a plain record is never served sealed
}

TEST(RedisStore, DownAtStartCostsNothingAndConnectsWhenRedisComesUp) {
  RedisTestServer redis;  // not started yet
  auto s = OpenStore(redis.url());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s->Read(MetaFor(1).key, RecordKind::kBlockRows).ok());
  EXPECT_EQ(s->ContainsAll(std::vector<RecordId>{{MetaFor(1).key, RecordKind::kBlockRows}}),
            std::vector<bool>{false});
  PutAndFlush(*s, 1);
  // Far below a connect timeout of the OS (the port refuses at once), with room for a loaded
  // machine.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  RedisStoreStats st = s->GetStats();
  EXPECT_FALSE(st.up);
  EXPECT_EQ(st.downs, 1u);  // logged once, not per call
  EXPECT_EQ(st.puts_written, 0u);
  EXPECT_EQ(st.put_drop_down + st.put_fail_io, 1u);
  ASSERT_TRUE(redis.Start());
  EXPECT_TRUE(Eventually([&] {
    PutAndFlush(*s, 2);
    return ReadsBack(*s, 2);
  }));
  EXPECT_TRUE(s->GetStats().up);
}

TEST(RedisStore, KilledAndRestartedRedisIsCountedAndReconnected) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url());
  PutAndFlush(*s, 1);
  ASSERT_TRUE(ReadsBack(*s, 1));
  redis.Kill();
  EXPECT_FALSE(ReadsBack(*s, 1));
  PutAndFlush(*s, 2);
  EXPECT_FALSE(s->GetStats().up);
  EXPECT_EQ(s->GetStats().downs, 1u);
  RedisTestServer again("", redis.port());  // the same address; its memory is empty
  ASSERT_TRUE(again.Start());
  EXPECT_TRUE(Eventually([&] {
    PutAndFlush(*s, 3);
    return ReadsBack(*s, 3);
  }));
  EXPECT_FALSE(ReadsBack(*s, 1));  // gone with the killed server: a clean miss
  RedisStoreStats st = s->GetStats();
  EXPECT_TRUE(st.up);
  EXPECT_EQ(st.get_corrupt, 0u);
}

TEST(RedisStore, ASlowRedisTimesOutWithinTheCommandTimeout) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url(), /*command_timeout_ms=*/200);
  PutAndFlush(*s, 1);
  ASSERT_TRUE(ReadsBack(*s, 1));
  redis.Pause();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ReadsBack(*s, 1));
  EXPECT_FALSE(ReadsBack(*s, 1));  // down now: not even sent
  // One 200 ms timeout, then no wait at all; a hang would be the 5 s default or more.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(3000));
  EXPECT_FALSE(s->GetStats().up);
  EXPECT_GE(s->GetStats().skipped_down, 1u);
  redis.Resume();
  EXPECT_TRUE(Eventually([&] { return ReadsBack(*s, 1); }));
}

TEST(RedisStore, TinyMaxmemoryEvictsOldRecordsAsCleanMisses) {
  RedisTestServer redis("2mb");
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url());
  constexpr uint32_t kRecords = 40;  // 40 x 200 KB = 8 MB into 2 MB
  for (uint32_t i = 0; i < kRecords; ++i) PutAndFlush(*s, i, 200 << 10);
  size_t present = 0;
  for (uint32_t i = 0; i < kRecords; ++i) present += ReadsBack(*s, i, 200 << 10) ? 1 : 0;
  RedisStoreStats st = s->GetStats();
  EXPECT_GT(present, 0u);
  EXPECT_LT(present, kRecords / 2);
  EXPECT_EQ(st.get_corrupt, 0u);
  EXPECT_EQ(st.get_not_found, kRecords - present);
  EXPECT_TRUE(ReadsBack(*s, kRecords - 1, 200 << 10));  // the newest survived
  EXPECT_NE(redis.Command({"INFO", "stats"}).find("evicted_keys:"), std::string::npos);
  auto info = s->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->maxmemory, 2u << 20);
  EXPECT_EQ(info->maxmemory_policy, "allkeys-lru");
  EXPECT_GT(info->evicted_keys, 0u);
}

TEST(RedisStore, AFullRedisRejectsPutsAndIsCountedNotFatal) {
  RedisTestServer redis;
  redis.AddArgs({"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"});  // OOM errors
  ASSERT_TRUE(redis.Start());
  auto s = OpenStore(redis.url());
  for (uint32_t i = 0; i < 8; ++i) PutAndFlush(*s, i, 256 << 10);
  RedisStoreStats st = s->GetStats();
  EXPECT_GT(st.put_fail_rejected, 0u);
  EXPECT_EQ(st.puts_written + st.put_fail_rejected, 8u);
  EXPECT_TRUE(st.up) << "an OOM answer is not an outage";
  for (uint32_t i = 0; i < 8; ++i) ReadsBack(*s, i, 256 << 10);  // hits or clean misses
  EXPECT_EQ(s->GetStats().get_corrupt, 0u);
}

TEST(RedisStore, AuthenticatesWithThePasswordAndIsDownWithAWrongOne) {
  RedisTestServer redis;
  redis.AddArgs({"--requirepass", "s3cret"});
  ASSERT_TRUE(redis.Start());
  RedisStoreOptions o;
  o.url = redis.url();
  o.password = "wrong";
  auto bad = RedisStore::Open(o);
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(ReadsBack(**bad, 1));
  EXPECT_FALSE((*bad)->GetStats().up);
  o.password = "s3cret";
  auto good = RedisStore::Open(o);
  ASSERT_TRUE(good.ok());
  PutAndFlush(**good, 1);
  EXPECT_TRUE(ReadsBack(**good, 1));
  EXPECT_TRUE((*good)->GetStats().up);
}

TEST(RedisStore, AFullQueueDropsAndCounts) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  RedisStoreOptions o;
  o.url = redis.url();
  o.writer_queue_depth = 2;
  auto s = RedisStore::Open(o);
  ASSERT_TRUE(s.ok());
  redis.Pause();  // the writer blocks on its first SET; the queue fills behind it
  size_t accepted = 0;
  for (uint32_t i = 0; i < 10; ++i) accepted += (*s)->PutAsync(MetaFor(i), PayloadPtr(i, 10));
  redis.Resume();
  (*s)->Flush();
  RedisStoreStats st = (*s)->GetStats();
  EXPECT_LE(accepted, 3u);
  EXPECT_EQ(st.put_drop_queue_full, 10 - accepted);
}

}  // namespace
}  // namespace prefixd::store
