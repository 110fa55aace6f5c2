#include "events/kv_replay.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "events/kv_events.h"
#include "util/process_memory.h"

namespace prefixd::events {
namespace {

std::string BigEndian(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(uint8_t(v >> (8 * (7 - i))));
  return s;
}

const std::string kEnd(8, '\xff');

uint64_t GaugeBytes() {
  for (const auto& [owner, bytes] : MemoryByOwner()) {
    if (owner == "kv_replay") return bytes;
  }
  return 0;
}

// A ZMQ context with a replay socket bound on inproc and a DEALER connected to it, as a
// subscriber asks.
class KvReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = zmq_ctx_new();
    KvReplayOptions o;
    o.endpoint = "inproc://kv-replay-test";
    o.max_messages = 4;
    auto r = KvReplay::Bind(ctx_, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    replay_ = std::move(*r);
    dealer_ = zmq_socket(ctx_, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(dealer_, ZMQ_LINGER, &linger, sizeof linger);
    ASSERT_EQ(zmq_connect(dealer_, o.endpoint.c_str()), 0);
  }

  void TearDown() override {
    zmq_close(dealer_);
    replay_.reset();
    zmq_ctx_term(ctx_);
  }

  void Ask(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      const int flags = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
      ASSERT_GE(zmq_send(dealer_, frames[i].data(), frames[i].size(), flags), 0);
    }
  }

  // Serves until a reply arrives or `wait` passes; the frames of each message received, up to
  // the end marker.
  std::vector<std::vector<std::string>> Answer(std::chrono::milliseconds wait =
                                                   std::chrono::milliseconds(2000)) {
    std::vector<std::vector<std::string>> out;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      replay_->Serve();
      zmq_pollitem_t item{dealer_, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 10) != 1) continue;
      std::vector<std::string> frames;
      for (int more = 1; more;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, dealer_, 0) < 0) return out;
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
        more = zmq_msg_more(&part);
        zmq_msg_close(&part);
      }
      out.push_back(frames);
      if (frames.size() == 3 && frames[1] == kEnd) break;
    }
    return out;
  }

  void* ctx_ = nullptr;
  void* dealer_ = nullptr;
  std::unique_ptr<KvReplay> replay_;
};

TEST_F(KvReplayTest, AnswersFromTheAskedSequenceWithTheBytesKeptThenTheEndMarker) {
  for (uint64_t seq = 0; seq < 4; ++seq) replay_->Keep(seq, "payload " + std::to_string(seq));
  Ask({"", BigEndian(2)});
  auto replies = Answer();
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0], (std::vector<std::string>{"", BigEndian(2), "payload 2"}));
  EXPECT_EQ(replies[1], (std::vector<std::string>{"", BigEndian(3), "payload 3"}));
  EXPECT_EQ(replies[2], (std::vector<std::string>{"", kEnd, ""}));
}

// vLLM reads the start as a big-endian integer of any length: shorter than 8 bytes, or longer
// (past 2^64 - 1 nothing is kept from there on).
TEST_F(KvReplayTest, AStartOfAnyLengthIsBigEndian) {
  for (uint64_t seq = 0; seq < 4; ++seq) replay_->Keep(seq, "p" + std::to_string(seq));
  Ask({"", std::string("\x03", 1)});
  auto replies = Answer();
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0][1], BigEndian(3));
  EXPECT_EQ(replies[1][1], kEnd);
  Ask({"", std::string(1, '\0') + BigEndian(2)});  // 9 bytes: 2
  EXPECT_EQ(Answer().size(), 3u);
  Ask({"", std::string(1, '\1') + BigEndian(0)});  // 9 bytes: 2^64
  replies = Answer();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0][1], kEnd);
}

// Older than what is kept: what is kept, from its first (vLLM does the same); the subscriber
// sees the gap from the first sequence replayed.
TEST_F(KvReplayTest, AStartOlderThanTheBufferGetsWhatIsKept) {
  for (uint64_t seq = 10; seq < 16; ++seq) replay_->Keep(seq, "p" + std::to_string(seq));
  EXPECT_EQ(replay_->n_messages(), 4u);
  Ask({"", BigEndian(0)});
  auto replies = Answer();
  ASSERT_EQ(replies.size(), 5u);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(replies[i][1], BigEndian(12 + i));
    EXPECT_EQ(replies[i][2], "p" + std::to_string(12 + i));
  }
  EXPECT_EQ(replies[4][1], kEnd);
}

TEST_F(KvReplayTest, AStartPastTheLastGetsTheEndMarkerAlone) {
  replay_->Keep(0, "p0");
  Ask({"", BigEndian(1)});
  auto replies = Answer();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0], (std::vector<std::string>{"", kEnd, ""}));
}

// [identity, k] without the delimiter is two frames: vLLM ignores it, and so does this.
TEST_F(KvReplayTest, ARequestOfAnotherShapeGetsNoAnswer) {
  replay_->Keep(0, "p0");
  Ask({BigEndian(0)});
  EXPECT_TRUE(Answer(std::chrono::milliseconds(200)).empty());
  Ask({"", BigEndian(0), "extra"});
  EXPECT_TRUE(Answer(std::chrono::milliseconds(200)).empty());
  Ask({"", BigEndian(0)});  // the socket still answers a good one
  EXPECT_EQ(Answer().size(), 2u);
}

TEST(KvReplayBoundsTest, KeepsTheNewestWithinMessagesAndBytesAndCountsThemInTheGauge) {
  void* ctx = zmq_ctx_new();
  KvReplayOptions o;
  o.endpoint = "inproc://kv-replay-bounds";
  o.max_messages = 3;
  o.max_bytes = 25;
  auto r = KvReplay::Bind(ctx, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const uint64_t before = GaugeBytes();
  KvReplay& replay = **r;
  replay.Keep(0, std::string(10, 'a'));
  replay.Keep(1, std::string(10, 'b'));
  EXPECT_EQ(replay.n_messages(), 2u);
  EXPECT_EQ(replay.n_bytes(), 20u);
  EXPECT_EQ(GaugeBytes() - before, 20u);
  replay.Keep(2, std::string(10, 'c'));  // 30 bytes > 25: the oldest leaves
  EXPECT_EQ(replay.n_messages(), 2u);
  EXPECT_EQ(replay.n_bytes(), 20u);
  EXPECT_EQ(GaugeBytes() - before, 20u);
  replay.Keep(3, std::string(1, 'd'));
  replay.Keep(4, std::string(1, 'e'));  // four messages > 3
  EXPECT_EQ(replay.n_messages(), 3u);
  EXPECT_EQ(replay.n_bytes(), 12u);
  replay.Keep(5, std::string(100, 'f'));  // larger than the bound alone: kept, alone
  EXPECT_EQ(replay.n_messages(), 1u);
  EXPECT_EQ(replay.n_bytes(), 100u);
  EXPECT_EQ(GaugeBytes() - before, 100u);
  r->reset();
  EXPECT_EQ(GaugeBytes(), before);
  zmq_ctx_term(ctx);
}

TEST(KvReplayBoundsTest, BindingAnAddressInUseIsAnError) {
  void* ctx = zmq_ctx_new();
  KvReplayOptions o;
  o.endpoint = "inproc://kv-replay-twice";
  auto first = KvReplay::Bind(ctx, o);
  ASSERT_TRUE(first.ok());
  auto second = KvReplay::Bind(ctx, o);
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.status().ToString().find("replay"), std::string::npos);
  first->reset();
  zmq_ctx_term(ctx);
}

// The publisher keeps every message it sends, also with no subscriber on the stream, and its
// sending thread answers: a late subscriber replays from 0 the messages it never saw.
TEST(KvReplayPublisherTest, ALateSubscriberReplaysEveryMessageFromZero) {
  KvEventOptions o;
  o.endpoint = "ipc:///tmp/prefixd-kv-replay-pub-" + std::to_string(getpid());
  o.replay.endpoint = "ipc:///tmp/prefixd-kv-replay-router-" + std::to_string(getpid());
  o.pod = "p";
  o.model = "m";
  auto p = KvEventPublisher::Start(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (int i = 0; i < 3; ++i) {
    (*p)->OnBlockEvent(cache::BlockEvent{.kind = cache::BlockEvent::Kind::kCleared});
    // one message each: wait until the thread has sent it
    for (int t = 0; t < 200 && (*p)->counts().published < uint64_t(i + 1); ++t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ASSERT_EQ((*p)->counts().published, 3u);

  void* ctx = zmq_ctx_new();
  void* dealer = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  ASSERT_EQ(zmq_connect(dealer, o.replay.endpoint.c_str()), 0);
  const std::string zero = BigEndian(0);
  zmq_send(dealer, "", 0, ZMQ_SNDMORE);
  zmq_send(dealer, zero.data(), zero.size(), 0);
  std::vector<std::string> seqs;
  std::vector<std::string> payloads;
  char buf[256];
  for (;;) {
    zmq_pollitem_t item{dealer, 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq_poll(&item, 1, 5000), 1) << "no answer after " << seqs.size() << " replies";
    ASSERT_EQ(zmq_recv(dealer, buf, sizeof buf, 0), 0);  // the delimiter
    const int n_seq = zmq_recv(dealer, buf, sizeof buf, 0);
    seqs.emplace_back(buf, std::max(n_seq, 0));
    const int n = zmq_recv(dealer, buf, sizeof buf, 0);
    payloads.emplace_back(buf, std::max(n, 0));
    if (seqs.back() == kEnd) break;
  }
  ASSERT_EQ(seqs.size(), 4u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(seqs[i], BigEndian(i));
    EXPECT_NE(payloads[i].find("AllBlocksCleared"), std::string::npos);
  }
  EXPECT_EQ(payloads[3], "");
  zmq_close(dealer);
  zmq_ctx_term(ctx);
  p->reset();
  unlink(o.endpoint.c_str() + 6);
  unlink(o.replay.endpoint.c_str() + 6);
}

TEST(KvReplayPublisherTest, ABadReplayEndpointIsAnError) {
  KvEventOptions o;
  o.endpoint = "inproc://kv-replay-pub-bad";
  o.replay.endpoint = "nonsense";
  auto p = KvEventPublisher::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().ToString().find("replay"), std::string::npos);
}

}  // namespace
}  // namespace prefixd::events
