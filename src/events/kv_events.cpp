#include "events/kv_events.h"

#include <zmq.h>

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "events/msgpack.h"
#include "util/mutex.h"

namespace prefixd::events {

namespace {

using cache::BlockEvent;

constexpr size_t kMaxEventsPerMessage = 256;  // cache events per message: a bounded payload
// How often the sending thread looks for subscriptions while no event is waiting.
constexpr std::chrono::milliseconds kPollEvery{50};
// How long a stopping publisher waits for its last messages to leave the socket.
constexpr std::chrono::milliseconds kLingerAtExit{500};

// vLLM's and LMCache's names for where a block is held. The RAM tier is host memory.
const char* MediumOf(cache::Tier tier) {
  switch (tier) {
    case cache::Tier::kSlot: return "GPU";
    case cache::Tier::kDisk: return "DISK";
    case cache::Tier::kRemote: return "REMOTE";
    default: return "CPU";
  }
}

// The event-block hashes of one cache Block, in token order.
void WriteHashes(MsgpackWriter& w, const cache::ChainHash& chain, size_t n_sub) {
  w.Array(n_sub);
  for (size_t j = 0; j < n_sub; ++j) w.Uint(KvBlockHash(chain, j));
}

// Array encoding: the tag first, then the fields in vLLM's order. Map encoding: "type" and
// the same fields by name.
void WriteTag(MsgpackWriter& w, const KvEventOptions& o, const char* type, size_t n_fields) {
  if (o.encoding == KvEventEncoding::kArray) {
    w.Array(n_fields + 1);
    w.Str(type);
  } else {
    w.Map(n_fields + 1);
    w.Str("type");
    w.Str(type);
  }
}

void WriteKey(MsgpackWriter& w, const KvEventOptions& o, const char* key) {
  if (o.encoding == KvEventEncoding::kMap) w.Str(key);
}

void WriteStored(MsgpackWriter& w, const KvEventOptions& o, const BlockEvent& e) {
  const size_t n_sub = o.cache_block_size / o.block_size;
  WriteTag(w, o, "BlockStored", 6);
  WriteKey(w, o, "block_hashes");
  WriteHashes(w, e.hash, n_sub);
  WriteKey(w, o, "parent_block_hash");
  if (e.depth <= 1) {
    w.Nil();  // the first Block of a prompt has no parent
  } else {
    w.Uint(KvBlockHash(e.parent, n_sub - 1));
  }
  WriteKey(w, o, "token_ids");
  w.Array(e.tokens.size());
  for (cache::Token t : e.tokens) w.Int(t);
  WriteKey(w, o, "block_size");
  w.Uint(o.block_size);
  WriteKey(w, o, "lora_id");
  w.Nil();
  WriteKey(w, o, "medium");
  w.Str(MediumOf(e.tier));
}

void WriteRemoved(MsgpackWriter& w, const KvEventOptions& o, const BlockEvent& e) {
  WriteTag(w, o, "BlockRemoved", 2);
  WriteKey(w, o, "block_hashes");
  WriteHashes(w, e.hash, o.cache_block_size / o.block_size);
  WriteKey(w, o, "medium");
  w.Str(MediumOf(e.tier));
}

void WriteEvent(MsgpackWriter& w, const KvEventOptions& o, const BlockEvent& e) {
  switch (e.kind) {
    case BlockEvent::Kind::kStored: return WriteStored(w, o, e);
    case BlockEvent::Kind::kRemoved: return WriteRemoved(w, o, e);
    case BlockEvent::Kind::kCleared: return WriteTag(w, o, "AllBlocksCleared", 0);
  }
}

class ZmqPublisher final : public KvEventPublisher {
 public:
  explicit ZmqPublisher(KvEventOptions opts) : opts_(std::move(opts)) {
    topic_ = "kv@" + opts_.pod + "@" + opts_.model;
  }

  ~ZmqPublisher() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();  // it sends what is queued first
    replay_.reset();  // its socket closes before the context ends
    if (socket_ != nullptr) {
      int linger = int(kLingerAtExit.count());  // the last messages leave, or are dropped
      zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
      zmq_close(socket_);
    }
    if (context_ != nullptr) zmq_ctx_term(context_);
  }

  Status Open() {
    context_ = zmq_ctx_new();
    // XPUB: a PUB that also hands up each subscription, so a subscriber that joins is sent
    // what the tiers hold (a PUB drops what was sent before a subscriber joined).
    socket_ = context_ ? zmq_socket(context_, ZMQ_XPUB) : nullptr;
    if (socket_ == nullptr) return Status::Internal("kv events: no ZMQ context");
    int linger = 0;  // an unsent message is dropped at exit, never waited for
    zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
    int verbose = 1;  // every subscription, also one equal to a subscription already there
    zmq_setsockopt(socket_, ZMQ_XPUB_VERBOSE, &verbose, sizeof verbose);
    const int rc = opts_.connect ? zmq_connect(socket_, opts_.endpoint.c_str())
                                 : zmq_bind(socket_, opts_.endpoint.c_str());
    if (rc != 0) {
      return Status::InvalidArgument(std::string("kv events: cannot ") +
                                     (opts_.connect ? "connect to " : "bind ") + opts_.endpoint +
                                     ": " + zmq_strerror(zmq_errno()));
    }
    if (!opts_.replay.endpoint.empty()) {
      auto replay = KvReplay::Bind(context_, opts_.replay);
      if (!replay.ok()) return replay.status();
      replay_ = std::move(*replay);
    }
    thread_ = std::thread([this] { Run(); });
    return Status::OK();
  }

  void OnBlockEvent(BlockEvent event) override {
    MutexLock lock(&mu_);
    if (queue_.size() >= opts_.max_queue) {
      ++counts_.dropped;
      return;
    }
    queue_.push_back(std::move(event));
    cv_.notify_one();
  }

  KvEventCounts counts() const override {
    MutexLock lock(&mu_);
    return counts_;
  }

  void Attach(cache::BlockSource* source) override {
    MutexLock lock(&source_mu_);  // waits for an announcement in progress
    source_ = source;
  }

 private:
  // Takes up to kMaxEventsPerMessage events, waiting at most kPollEvery; empty when there are
  // none yet. Sets *stop when stopping and nothing is left to send.
  std::vector<BlockEvent> Take(bool* stop) {
    MutexLock lock(&mu_);
    if (!stopping_ && queue_.empty()) cv_.WaitFor(lock, kPollEvery);
    std::vector<BlockEvent> batch;
    *stop = stopping_ && queue_.empty();
    while (!queue_.empty() && batch.size() < kMaxEventsPerMessage) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return batch;
  }

  void Run() {
    for (bool stop = false; !stop;) {
      if (SubscriberJoined()) Announce();
      if (replay_ != nullptr) replay_->Serve();
      std::vector<BlockEvent> batch = Take(&stop);
      if (batch.empty()) continue;
      const double ts = std::chrono::duration<double>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
      const bool sent = Publish(EncodeKvEventBatch(batch, opts_, ts));
      MutexLock lock(&mu_);
      (sent ? counts_.published : counts_.dropped) += batch.size();
    }
  }

  // Reads the subscriptions the XPUB socket handed up; true when one was a subscribe (first
  // byte 1) rather than an unsubscribe (0).
  bool SubscriberJoined() {
    bool joined = false;
    unsigned char frame[256];
    for (int n; (n = zmq_recv(socket_, frame, sizeof frame, ZMQ_DONTWAIT)) >= 0;) {
      if (n >= 1 && frame[0] == 1) joined = true;
    }
    return joined;
  }

  // The source reports what the tiers hold; its events come back through OnBlockEvent.
  void Announce() {
    MutexLock lock(&source_mu_);
    if (source_ != nullptr) source_->AnnounceBlocks();
  }

  // Sends the message under the next sequence number and keeps it for replay, also when the
  // socket refused it: a subscriber that sees the gap can ask for it.
  bool Publish(std::string payload) {
    const uint64_t seq = sequence_++;  // a gap tells the subscriber a message was lost
    const bool sent = Send(seq, payload);
    if (replay_ != nullptr) replay_->Keep(seq, std::move(payload));
    return sent;
  }

  // The three frames; a PUB socket drops at its high-water mark rather than block.
  bool Send(uint64_t sequence, const std::string& payload) {
    unsigned char seq[8];
    for (int i = 0; i < 8; ++i) seq[i] = uint8_t(sequence >> (8 * (7 - i)));
    return zmq_send(socket_, topic_.data(), topic_.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
           zmq_send(socket_, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
           zmq_send(socket_, payload.data(), payload.size(), ZMQ_DONTWAIT) >= 0;
  }

  const KvEventOptions opts_;
  std::string topic_;
  void* context_ = nullptr;
  void* socket_ = nullptr;  // used by the sending thread only, after Open
  uint64_t sequence_ = 0;   // the sending thread's
  std::unique_ptr<KvReplay> replay_;  // null without a replay endpoint; the sending thread's
  std::thread thread_;
  Mutex source_mu_;  // held while the source announces: Attach waits for it
  cache::BlockSource* source_ PREFIXD_GUARDED_BY(source_mu_) = nullptr;
  mutable Mutex mu_;
  CondVar cv_;  // signalled when queue_ grows or stopping_ is set
  std::deque<BlockEvent> queue_ PREFIXD_GUARDED_BY(mu_);
  KvEventCounts counts_ PREFIXD_GUARDED_BY(mu_);
  bool stopping_ PREFIXD_GUARDED_BY(mu_) = false;
};

}  // namespace

uint64_t KvBlockHash(const cache::ChainHash& chain, size_t sub) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint8_t b) { h = (h ^ b) * 0x100000001b3ull; };
  for (uint8_t b : chain) mix(b);
  for (int i = 0; i < 4; ++i) mix(uint8_t(sub >> (8 * i)));
  return h & 0x7fffffffffffffffull;
}

std::string EncodeKvEventBatch(std::span<const BlockEvent> batch, const KvEventOptions& opts,
                               double ts) {
  MsgpackWriter w;
  w.Array(3);
  w.Double(ts);
  w.Array(batch.size());
  for (const BlockEvent& e : batch) WriteEvent(w, opts, e);
  w.Uint(0);  // data-parallel rank: one engine
  return w.bytes();
}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(KvEventOptions opts) {
  if (opts.block_size == 0 || opts.cache_block_size % opts.block_size != 0) {
    return Status::InvalidArgument("--kv-events-block-size " + std::to_string(opts.block_size) +
                                   " does not divide the cache's block size " +
                                   std::to_string(opts.cache_block_size));
  }
  auto p = std::make_unique<ZmqPublisher>(std::move(opts));
  PREFIXD_RETURN_IF_ERROR(p->Open());
  return std::unique_ptr<KvEventPublisher>(std::move(p));
}

}  // namespace prefixd::events
