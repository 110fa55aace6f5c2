// KV events: the slots', RAM and disk tiers' Blocks as llm-d's / vLLM's KV-event stream
// (docs/kv-events.md), so a router (llm-d's kv-cache indexer, Dynamo's kv-indexer) can see where
// prefixes are held.
//
// Each message is three ZMQ frames: the topic "kv@<pod>@<model>", an 8-byte big-endian
// sequence number (0, 1, 2, ...), and a MessagePack payload [ts, [events...], 0]. Each
// prefixd Block of B tokens is published as B / block_size event blocks, parent first:
//   ["BlockStored", [hashes], parent_hash | nil, token_ids, block_size, nil, medium]
//   ["BlockRemoved", [hashes], medium]
//   ["AllBlocksCleared"]
// or, with KvEventEncoding::kMap, maps with a "type" key and vLLM's field names.
//
// The socket is an XPUB: when a subscriber joins (a subscription arrives), the sending thread
// asks the attached cache (BlockListener::Attach) to report again what its tiers hold, so a
// subscriber that joins late, or outlives a restart of the server, converges.
//
// Stopping, it sends what is queued (the RAM tier's Blocks reported removed, say) and waits at
// most half a second for the last messages to leave.
//
// With a replay endpoint (opts.replay), the sending thread also keeps the last messages and
// answers vLLM's replay requests between sends (events/kv_replay.h).
//
// Publishing never blocks a request: OnBlockEvent copies the event into a bounded queue
// (dropped and counted when full); one thread encodes and sends with ZMQ_DONTWAIT (a send the
// socket refuses is dropped and counted too).
//
// Thread-safety: OnBlockEvent and counts() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "cache/block_listener.h"
#include "events/kv_replay.h"
#include "util/status.h"

namespace prefixd::events {

enum class KvEventEncoding : uint8_t { kArray, kMap };

struct KvEventOptions {
  std::string endpoint;          // a ZMQ endpoint, e.g. tcp://*:5557
  bool connect = false;          // connect to the endpoint (false: bind it)
  std::string pod;               // the topic's pod name
  std::string model;             // the topic's model name: the served id
  size_t block_size = 16;        // tokens per published block. REQUIRES: divides cache_block_size
  size_t cache_block_size = 256; // B, the cache's Block
  KvEventEncoding encoding = KvEventEncoding::kArray;
  size_t max_queue = 65536;      // cache events waiting; more are dropped
  KvReplayOptions replay;        // endpoint "": no replay socket
};

// The published hash of event block `sub` (0 .. B/block_size - 1) of the cache Block `chain`:
// FNV-1a 64 of the ChainHash's 32 bytes then `sub` as 4 little-endian bytes, below 2^63.
uint64_t KvBlockHash(const cache::ChainHash& chain, size_t sub);

// The payload of one message: [ts, [events of `batch`...], 0].
std::string EncodeKvEventBatch(std::span<const cache::BlockEvent> batch,
                               const KvEventOptions& opts, double ts);

// Where each event went: sent in a message, dropped (queue full or the socket refused).
struct KvEventCounts {
  uint64_t published = 0;
  uint64_t dropped = 0;
};

class KvEventPublisher : public cache::BlockListener {
 public:
  // Opens the socket (bind or connect), binds the replay socket if asked, and starts the
  // sending thread. Fails on a bad endpoint, an address in use, or a block_size that does not
  // divide cache_block_size.
  static Result<std::unique_ptr<KvEventPublisher>> Start(KvEventOptions opts);
  virtual KvEventCounts counts() const = 0;
};

}  // namespace prefixd::events
