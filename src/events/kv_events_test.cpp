#include "events/kv_events.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <string>

namespace prefixd::events {
namespace {

using cache::BlockEvent;

cache::ChainHash HashOf(uint8_t b) {
  cache::ChainHash h{};
  h.fill(b);
  return h;
}

KvEventOptions FourByTwo() {
  KvEventOptions o;
  o.block_size = 2;
  o.cache_block_size = 4;
  return o;
}

TEST(KvEventsTest, HashesAreBelowTwoToThe63AndDifferPerSubBlock) {
  for (uint8_t b = 0; b < 64; ++b) {
    for (size_t sub = 0; sub < 4; ++sub) EXPECT_LT(KvBlockHash(HashOf(b), sub), 1ull << 63);
  }
  EXPECT_NE(KvBlockHash(HashOf(1), 0), KvBlockHash(HashOf(1), 1));
  EXPECT_NE(KvBlockHash(HashOf(1), 0), KvBlockHash(HashOf(2), 0));
}

// The payload starts [ts, [events...]: a fixarray of 3, a float64, then the events' array.
TEST(KvEventsTest, BatchIsTsEventsRank) {
  BlockEvent stored{.kind = BlockEvent::Kind::kStored, .hash = HashOf(7), .depth = 1,
                    .tokens = {1, 2, 3, 4}};
  BlockEvent cleared{.kind = BlockEvent::Kind::kCleared};
  std::vector<BlockEvent> batch{stored, cleared};
  const std::string p = EncodeKvEventBatch(batch, FourByTwo(), 1.0);
  ASSERT_GE(p.size(), 12u);
  EXPECT_EQ(uint8_t(p[0]), 0x93);
  EXPECT_EQ(uint8_t(p[1]), 0xcb);
  EXPECT_EQ(uint8_t(p[10]), 0x92);  // two events
  EXPECT_EQ(uint8_t(p[11]), 0x97);  // BlockStored: tag + 6 fields
  EXPECT_EQ(uint8_t(p.back()), 0x00);  // dp rank 0
  // ... then AllBlocksCleared alone in its array, just before the rank.
  const std::string cleared_tail = std::string("\x91\xb0" "AllBlocksCleared", 18);
  EXPECT_EQ(p.substr(p.size() - 1 - cleared_tail.size(), cleared_tail.size()), cleared_tail);
}

TEST(KvEventsTest, MapEncodingNamesTheType) {
  BlockEvent removed{.kind = BlockEvent::Kind::kRemoved, .hash = HashOf(7), .depth = 2};
  KvEventOptions o = FourByTwo();
  o.encoding = KvEventEncoding::kMap;
  const std::string p = EncodeKvEventBatch(std::vector<BlockEvent>{removed}, o, 1.0);
  EXPECT_EQ(uint8_t(p[11]), 0x83);  // {type, block_hashes, medium}
  EXPECT_NE(p.find("BlockRemoved"), std::string::npos);
  EXPECT_NE(p.find("CPU"), std::string::npos);
}

TEST(KvEventsTest, StartRefusesABlockSizeThatDoesNotDivide) {
  KvEventOptions o;
  o.endpoint = "inproc://kv-test";
  o.block_size = 24;
  o.cache_block_size = 256;
  EXPECT_FALSE(KvEventPublisher::Start(o).ok());
  o.block_size = 16;
  auto p = KvEventPublisher::Start(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  (*p)->OnBlockEvent(BlockEvent{.kind = BlockEvent::Kind::kCleared});
}

// A source that announces one AllBlocksCleared each time it is asked.
struct OneEventSource : cache::BlockSource {
  void AnnounceBlocks() override {
    ++calls;
    to->OnBlockEvent(BlockEvent{.kind = BlockEvent::Kind::kCleared});
  }
  cache::BlockListener* to = nullptr;
  std::atomic<int> calls{0};
};

// A subscriber that joins is sent what the attached source announces: the XPUB socket hands
// its subscription to the sending thread, which asks the source.
TEST(KvEventsTest, ASubscriberThatJoinsIsSentWhatTheSourceHolds) {
  KvEventOptions o;
  o.endpoint = "ipc:///tmp/prefixd-kv-events-test-" + std::to_string(getpid());
  o.pod = "p";
  o.model = "m";
  auto p = KvEventPublisher::Start(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  OneEventSource source;
  source.to = p->get();
  (*p)->Attach(&source);
  EXPECT_EQ(source.calls, 0) << "asked before anyone subscribed";

  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  int linger = 0;
  zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
  ASSERT_EQ(zmq_connect(sub, o.endpoint.c_str()), 0);
  zmq_pollitem_t item{sub, 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq_poll(&item, 1, 5000), 1) << "nothing arrived after subscribing";
  char frame[256];
  const int topic = zmq_recv(sub, frame, sizeof frame, 0);
  EXPECT_EQ(std::string(frame, std::max(topic, 0)), "kv@p@m");
  zmq_recv(sub, frame, sizeof frame, 0);  // the sequence
  const int n = zmq_recv(sub, frame, sizeof frame, 0);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(frame, n).find("AllBlocksCleared"), std::string::npos);
  EXPECT_EQ(source.calls, 1);
  (*p)->Attach(nullptr);
  zmq_close(sub);
  zmq_ctx_term(ctx);
  p->reset();
  unlink(o.endpoint.c_str() + 6);
}

TEST(KvEventsTest, BadEndpointIsAnError) {
  KvEventOptions o;
  o.endpoint = "nonsense";
  EXPECT_FALSE(KvEventPublisher::Start(o).ok());
}

}  // namespace
}  // namespace prefixd::events
