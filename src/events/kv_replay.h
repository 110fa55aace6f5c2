// KV-event replay: vLLM's replay socket (ZmqEventPublisher's `replay_endpoint`) beside the
// KV-event stream (docs/kv-events.md, "Replay").
//
// The publisher keeps its last messages. A subscriber that saw a gap in the sequence asks a
// ZMQ ROUTER socket for the messages from sequence k on, and is sent every kept message whose
// sequence is k or later, oldest first, with the payload's bytes exactly as first published,
// then an end marker:
//   request  [identity, "", k]          k big-endian (vLLM reads any length; 8 bytes is usual).
//                                       A DEALER sends ["", k]; ROUTER prepends the identity.
//   replies  [identity, "", seq, payload]   seq: 8 bytes, big-endian
//   end      [identity, "", -1, ""]         -1: 8 bytes ff; the payload frame empty
// A request of any other number of frames gets no answer (vLLM logs and ignores it). A k older
// than what is kept gets what is kept (vLLM does the same: the subscriber sees from the first
// replayed sequence that older messages are gone); a k beyond the last gets the end marker
// alone.
//
// Bounds: at most max_messages messages (vLLM's buffer_steps) and max_bytes payload bytes; the
// oldest leave first, and the newest message is always kept. Replies share the kept payloads
// (no copy per request); the bytes alive, kept or still on their way to a requester, are
// counted in the memory gauge "kv_replay" (prefixd_memory_bytes{owner="kv_replay"}).
//
// Never in a request's way: Serve answers only the requests already waiting (at most
// kMaxRequestsPerServe per call) and sends with ZMQ_DONTWAIT; a requester whose queue is full
// (it does not read) loses the rest of its answer, end marker included, as ROUTER drops
// rather than blocks.
//
// Thread-safety: none. One thread (the KV-event publisher's sending thread) calls every method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "util/status.h"

namespace prefixd::events {

struct KvReplayOptions {
  std::string endpoint;               // "": no replay socket. A ZMQ endpoint to bind (ROUTER)
  size_t max_messages = 10000;        // vLLM's buffer_steps default. REQUIRES: >= 1
  size_t max_bytes = size_t(64) << 20;  // payload bytes kept
};

class KvReplay {
 public:
  // Binds a ROUTER socket at opts.endpoint in `zmq_context`. Fails on a bad endpoint or an
  // address in use. REQUIRES: zmq_context outlives the KvReplay; opts.max_messages >= 1.
  static Result<std::unique_ptr<KvReplay>> Bind(void* zmq_context, KvReplayOptions opts);
  virtual ~KvReplay() = default;  // closes the socket at once (linger 0)

  // Keeps message `seq` with its payload's bytes as published, dropping the oldest messages
  // beyond the bounds. REQUIRES: seq is greater than every seq kept before.
  virtual void Keep(uint64_t seq, std::string payload) = 0;

  // Answers the requests waiting on the socket; returns at once when none is.
  virtual void Serve() = 0;

  virtual size_t n_messages() const = 0;
  virtual size_t n_bytes() const = 0;  // the kept payloads' bytes
};

// Requests one Serve call answers at most: the rest wait for the next call.
inline constexpr int kMaxRequestsPerServe = 8;

}  // namespace prefixd::events
