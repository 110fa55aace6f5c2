// RedisStore: the shared tier, a RecordStore on a Redis server that several prefixd servers
// use at once (docs/deployment.md).
//
// Layout: one Redis string per record, key "pxd:1:<64 hex key>.<kind>" (the disk tier's file
// name: the same content address, so the model fingerprint, the cache layout and the tenant
// salt are in it), value = the record exactly as a record file holds it (docs/disk-format.md:
// header with the tokens, payload, both checksums). Redis bounds the memory itself
// (maxmemory, allkeys-lru): a record may vanish at any time, and Read then says NotFound.
//
// Never in the way of a request:
//   - PutAsync queues for one writer thread (bounded by count and bytes); a full queue or a
//     Redis that is down drops the record and counts it.
//   - Reads use a small pool of connections with connect and command timeouts; while Redis is
//     down (backing off between reconnects) they fail at once without I/O.
//   - A value that fails to decode (checksums, sizes, another key's header) is deleted,
//     counted and reported as Corruption, never served.
//   - Redis down at start, lost, slow, full (OOM errors) or answering garbage is counted and
//     logged once per change of state (RemoteHealth); the store reconnects by itself.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "store/record_store.h"

namespace prefixd::store {

struct RedisStoreOptions {
  std::string url;                  // redis://HOST:PORT[/DB]
  std::string password;             // AUTH when not empty
  int connect_timeout_ms = 300;
  int command_timeout_ms = 1000;
  size_t read_connections = 4;
  size_t writer_queue_depth = 256;
  uint64_t writer_queue_bytes = uint64_t(256) << 20;  // payload bytes the queue may pin
};

struct RedisStoreStats {
  bool up = false;             // the last command or connect succeeded
  uint64_t downs = 0;          // changes to down (Redis unreachable at start counts once)
  size_t queue_depth = 0;

  uint64_t puts_accepted = 0;
  uint64_t puts_written = 0;
  uint64_t put_drop_queue_full = 0;
  uint64_t put_drop_down = 0;       // Redis was down when the writer got to it
  uint64_t put_fail_rejected = 0;   // Redis answered an error (OOM with maxmemory, ...)
  uint64_t put_fail_io = 0;         // the connection failed while writing
  uint64_t bytes_written = 0;

  uint64_t gets = 0;
  uint64_t get_hits = 0;
  uint64_t get_not_found = 0;   // never stored, or evicted by Redis
  uint64_t get_corrupt = 0;     // a value that failed verification (deleted)
  uint64_t get_errors = 0;      // the connection failed, or Redis answered an error
  uint64_t skipped_down = 0;    // reads and lookups not sent: Redis was down
  uint64_t bytes_read = 0;
};

// What Redis itself says (INFO): for `prefixd cache stats --remote-cache`.
struct RedisServerInfo {
  uint64_t used_memory = 0;
  uint64_t maxmemory = 0;       // 0: unbounded (set one: docs/deployment.md)
  std::string maxmemory_policy;
  uint64_t keys = 0;            // in the selected database
  uint64_t evicted_keys = 0;
  std::string version;
};

class RedisStore : public RecordStore {
 public:
  // InvalidArgument / NotSupported for a bad URL. Never fails because Redis is down: the
  // store starts down and connects when Redis answers.
  static Result<std::unique_ptr<RedisStore>> Open(const RedisStoreOptions& options);
  // Writes what is queued (dropping it at once when Redis is down) and stops the writer.
  ~RedisStore() override = default;

  // Waits until every put queued before the call is written or dropped.
  virtual void Flush() = 0;
  virtual RedisStoreStats GetStats() = 0;
  virtual Result<RedisServerInfo> ServerInfo() = 0;
  // "redis://host:port/db", for logs.
  virtual const std::string& name() const = 0;
};

// The Redis key of a record: "pxd:1:<64 hex key>.<kind>".
std::string RedisKey(const RecordId& id);

}  // namespace prefixd::store
