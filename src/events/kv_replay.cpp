#include "events/kv_replay.h"

#include <zmq.h>

#include <algorithm>
#include <cassert>
#include <deque>
#include <limits>
#include <vector>

#include "util/process_memory.h"

namespace prefixd::events {

namespace {

// A request is an identity, an empty delimiter and a sequence number: a frame longer than this
// is no request, and ZMQ drops its sender (ZMQ_MAXMSGSIZE) before it is read.
constexpr int64_t kMaxRequestFrame = 256;
constexpr int kRequestFrames = 3;  // [identity, "", start sequence], as vLLM reads it
const unsigned char kEndSeq[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // -1

MemoryGauge& Gauge() {
  static MemoryGauge g("kv_replay");
  return g;
}

// A payload shared by the buffer and the replies on their way; its bytes are in the gauge for
// as long as it lives.
using Payload = std::shared_ptr<const std::string>;

Payload Counted(std::string bytes) {
  const int64_t n = int64_t(bytes.size());
  Gauge().Add(n);
  return Payload(new std::string(std::move(bytes)), [n](const std::string* p) {
    Gauge().Add(-n);
    delete p;
  });
}

// The start sequence of a request: its bytes big-endian, of any length (vLLM's
// int.from_bytes); past 2^64 - 1 it is that (nothing is kept from there on).
uint64_t StartSequence(const std::string& bytes) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t v = 0;
  for (unsigned char b : bytes) {
    if (v > (kMax >> 8)) return kMax;
    v = (v << 8) | b;
  }
  return v;
}

bool SendCopy(void* socket, const void* data, size_t n, bool more) {
  return zmq_send(socket, data, n, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
}

// The last frame of a reply: the kept payload itself, held by the message until ZMQ is done.
bool SendShared(void* socket, const Payload& payload) {
  auto* hold = new Payload(payload);
  zmq_msg_t msg;
  const int rc = zmq_msg_init_data(
      &msg, const_cast<char*>((*hold)->data()), (*hold)->size(),
      [](void*, void* hint) { delete static_cast<Payload*>(hint); }, hold);
  if (rc != 0) {
    delete hold;
    return false;
  }
  if (zmq_msg_send(&msg, socket, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&msg);  // frees `hold` through the callback
    return false;
  }
  return true;
}

class ZmqReplay final : public KvReplay {
 public:
  ZmqReplay(void* socket, KvReplayOptions opts) : socket_(socket), opts_(std::move(opts)) {}
  ~ZmqReplay() override { zmq_close(socket_); }

  void Keep(uint64_t seq, std::string payload) override {
    assert(kept_.empty() || seq > kept_.back().seq);
    bytes_ += payload.size();
    kept_.push_back(Entry{seq, Counted(std::move(payload))});
    while (kept_.size() > opts_.max_messages || (bytes_ > opts_.max_bytes && kept_.size() > 1)) {
      bytes_ -= kept_.front().payload->size();
      kept_.pop_front();
    }
  }

  void Serve() override {
    std::vector<std::string> frames;
    for (int i = 0; i < kMaxRequestsPerServe && Receive(&frames); ++i) {
      if (frames.size() == kRequestFrames) Answer(frames[0], StartSequence(frames[2]));
    }
  }

  size_t n_messages() const override { return kept_.size(); }
  size_t n_bytes() const override { return bytes_; }

 private:
  struct Entry {
    uint64_t seq;
    Payload payload;
  };

  // The frames of one waiting request (at most kRequestFrames + 1 kept: more is no request);
  // false when none is waiting.
  bool Receive(std::vector<std::string>* frames) {
    frames->clear();
    zmq_msg_t part;
    zmq_msg_init(&part);
    bool got = zmq_msg_recv(&part, socket_, ZMQ_DONTWAIT) >= 0;
    for (bool first = true; got; first = false) {
      if (!first && zmq_msg_recv(&part, socket_, 0) < 0) break;  // the rest came with it
      if (frames->size() <= kRequestFrames) {
        frames->emplace_back(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
      }
      if (!zmq_msg_more(&part)) break;
    }
    zmq_msg_close(&part);
    return got;
  }

  // Every kept message from `from` on, then the end marker.
  void Answer(const std::string& identity, uint64_t from) {
    auto it = std::lower_bound(kept_.begin(), kept_.end(), from,
                               [](const Entry& e, uint64_t s) { return e.seq < s; });
    for (; it != kept_.end(); ++it) {
      unsigned char seq[8];
      for (int i = 0; i < 8; ++i) seq[i] = uint8_t(it->seq >> (8 * (7 - i)));
      if (!SendHead(identity) || !SendCopy(socket_, seq, sizeof seq, true) ||
          !SendShared(socket_, it->payload)) {
        return;
      }
    }
    if (SendHead(identity) && SendCopy(socket_, kEndSeq, sizeof kEndSeq, true)) {
      SendCopy(socket_, "", 0, false);
    }
  }

  // The routing identity and the empty delimiter that open every reply.
  bool SendHead(const std::string& identity) {
    return SendCopy(socket_, identity.data(), identity.size(), true) &&
           SendCopy(socket_, "", 0, true);
  }

  void* const socket_;
  const KvReplayOptions opts_;
  std::deque<Entry> kept_;  // ascending seq; within opts_'s bounds after each Keep
  size_t bytes_ = 0;        // the kept payloads' sizes, summed
};

}  // namespace

Result<std::unique_ptr<KvReplay>> KvReplay::Bind(void* zmq_context, KvReplayOptions opts) {
  assert(opts.max_messages >= 1);
  void* socket = zmq_socket(zmq_context, ZMQ_ROUTER);
  if (socket == nullptr) return Status::Internal("kv events replay: no ZMQ socket");
  int linger = 0;  // an answer not yet sent is dropped at exit
  zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
  // One whole answer fits a requester's queue (every kept message and the end marker).
  int hwm = int(std::min<size_t>(opts.max_messages + 1, std::numeric_limits<int>::max()));
  zmq_setsockopt(socket, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &kMaxRequestFrame, sizeof kMaxRequestFrame);
  if (zmq_bind(socket, opts.endpoint.c_str()) != 0) {
    Status s = Status::InvalidArgument("kv events: cannot bind the replay socket " +
                                       opts.endpoint + ": " + zmq_strerror(zmq_errno()));
    zmq_close(socket);
    return s;
  }
  return std::unique_ptr<KvReplay>(new ZmqReplay(socket, std::move(opts)));
}

}  // namespace prefixd::events
