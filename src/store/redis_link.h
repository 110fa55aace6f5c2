// RedisLink: one connection to Redis (hiredis) with connect and command timeouts, AUTH and
// SELECT, reconnecting by itself. Internal to the shared tier (redis_store.cpp). Not
// thread-safe: one thread at a time (the caller locks).
//
// A command that fails on the connection (refused, reset, timed out) drops it and reports the
// tier down (RemoteHealth); the next call after the shared backoff connects again. While
// backing off, calls fail at once without I/O, so a Redis that is down costs the callers
// nothing but a counter. A connection made before the tier last went down is dropped unused.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <hiredis/hiredis.h>

#include "store/remote_health.h"
#include "util/status.h"

namespace prefixd::store {

struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string ToString() const;  // "redis://host:port/db"
};

// Parses "redis://HOST:PORT[/DB]" (PORT defaults to 6379 when ":PORT" is left out).
// InvalidArgument names what is wrong; "rediss://" (TLS) is refused as unsupported: Debian's
// hiredis 0.14 has no TLS.
Result<RedisAddress> ParseRedisUrl(std::string_view url);

struct RedisLinkOptions {
  RedisAddress address;
  std::string password;            // AUTH when not empty
  int connect_timeout_ms = 300;
  int command_timeout_ms = 1000;   // a slower command drops the connection
};

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

// One command: its arguments as byte strings (binary safe).
using Command = std::vector<std::string_view>;

enum class LinkOutcome {
  kOk,      // every command got a reply (some replies may be Redis errors: check each)
  kDown,    // not connected (backing off, or the connect failed): nothing was sent
  kFailed,  // the connection failed during the commands: dropped, backing off
};

// One GET's value as it arrives on the connection: the consumer reads its `length()` bytes in
// order straight into where they go (no reply object, no growing buffer); what it does not
// read is skipped after it returns.
class BulkReader {
 public:
  virtual ~BulkReader() = default;
  virtual size_t length() const = 0;
  // The next `n` bytes of the value into `dst`. False when the connection failed or fewer
  // than `n` bytes of the value are left.
  virtual bool Read(uint8_t* dst, size_t n) = 0;
};

enum class GetReply { kValue, kNil, kError };
// Called once per key, in order; `value` is set (and valid during the call) for kValue only.
using GetSink = std::function<void(size_t index, GetReply kind, BulkReader* value)>;

class RedisLink {
 public:
  // REQUIRES: health outlives the link.
  RedisLink(RedisLinkOptions options, RemoteHealth& health);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  // Sends `commands` in one pipeline and reads one reply for each into `replies`.
  LinkOutcome Run(const std::vector<Command>& commands, std::vector<Reply>* replies);
  // GETs every key in one pipeline and hands each reply to `sink` as it is read off the
  // socket (large values are read once, into the consumer's memory). kFailed when the
  // connection failed or a reply was not a GET's; the sink may have seen some replies then.
  LinkOutcome RunGets(const std::vector<std::string>& keys, const GetSink& sink);

 private:
  class SocketReader;
  bool Flush();
  bool Connect();
  bool Setup();
  void Drop(const std::string& why);

  RedisLinkOptions options_;
  RemoteHealth& health_;
  redisContext* ctx_ = nullptr;
  uint64_t epoch_ = 0;  // health_.epoch() when ctx_ connected
};

}  // namespace prefixd::store
