#include "store/redis_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <thread>

#include "store/redis_link.h"
#include "store/remote_health.h"
#include "util/mutex.h"

namespace prefixd::store {

namespace {

uint64_t NowMs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

std::string_view View(const std::vector<uint8_t>& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

bool IsError(const Reply& r) { return r->type == REDIS_REPLY_ERROR; }

constexpr const char* kDownMessage = "shared tier down";

// A read connection of the pool; `mu` is held for one call.
struct PooledLink {
  Mutex mu;
  RedisLink link PREFIXD_GUARDED_BY(mu);
  PooledLink(const RedisLinkOptions& o, RemoteHealth& h) : link(o, h) {}
};

struct PutJob {
  RecordMeta meta;
  std::shared_ptr<const std::vector<uint8_t>> payload;
};

class RedisStoreImpl final : public RedisStore {
 public:
  RedisStoreImpl(const RedisStoreOptions& o, const RedisAddress& a)
      : options_(o),
        name_(a.ToString()),
        health_(name_, BackoffOptions{}),
        writer_link_(LinkOptions(a), health_) {
    for (size_t i = 0; i < std::max<size_t>(o.read_connections, 1); ++i) {
      pool_.push_back(std::make_unique<PooledLink>(LinkOptions(a), health_));
    }
    writer_ = std::thread([this] { WriterLoop(); });
  }
  ~RedisStoreImpl() override;

  bool PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) override;
  Result<Record> Read(const Key& key, RecordKind kind) override;
  bool Contains(const Key& key, RecordKind kind) override;
  std::vector<bool> ContainsAll(std::span<const RecordId> ids) override;
  std::vector<Result<Record>> ReadAll(std::span<const RecordId> ids) override;
  Status Remove(const Key& key, RecordKind kind) override;
  void Flush() override;
  RedisStoreStats GetStats() override;
  Result<RedisServerInfo> ServerInfo() override;
  const std::string& name() const override { return name_; }

  // Runs `commands` on a free read connection (or waits for one).
  LinkOutcome RunRead(const std::vector<Command>& commands, std::vector<Reply>* replies);
  // GETs `keys` on a free read connection (RedisLink::RunGets).
  LinkOutcome RunGets(const std::vector<std::string>& keys, const GetSink& sink);

 private:
  RedisLinkOptions LinkOptions(const RedisAddress& a) const {
    RedisLinkOptions lo;
    lo.address = a;
    lo.password = options_.password;
    lo.connect_timeout_ms = options_.connect_timeout_ms;
    lo.command_timeout_ms = options_.command_timeout_ms;
    return lo;
  }
  void WriterLoop();
  void Write(const PutJob& job);
  Result<Record> FromReply(const RecordId& id, GetReply kind, BulkReader* value);
  void CountRead(const Result<Record>& rec, uint64_t bytes);
  template <typename F>
  void Count(F f) {
    MutexLock lock(&stats_mu_);
    f(stats_);
  }

  const RedisStoreOptions options_;
  const std::string name_;
  RemoteHealth health_;
  std::vector<std::unique_ptr<PooledLink>> pool_;
  std::atomic<size_t> next_link_{0};

  Mutex stats_mu_;
  RedisStoreStats stats_ PREFIXD_GUARDED_BY(stats_mu_);

  Mutex mu_;  // guards the queue below
  CondVar cv_;
  std::deque<PutJob> queue_ PREFIXD_GUARDED_BY(mu_);
  uint64_t queued_bytes_ PREFIXD_GUARDED_BY(mu_) = 0;
  uint64_t enqueued_ PREFIXD_GUARDED_BY(mu_) = 0;  // puts taken, for Flush
  uint64_t finished_ PREFIXD_GUARDED_BY(mu_) = 0;  // puts written or dropped, for Flush
  bool stopping_ PREFIXD_GUARDED_BY(mu_) = false;
  RedisLink writer_link_;  // the writer thread's own connection
  std::thread writer_;
};

RedisStoreImpl::~RedisStoreImpl() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

bool RedisStoreImpl::PutAsync(RecordMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) {
  const uint64_t bytes = payload->size();
  {
    MutexLock lock(&mu_);
    const bool full = queue_.size() >= options_.writer_queue_depth ||
                      (!queue_.empty() && queued_bytes_ + bytes > options_.writer_queue_bytes);
    if (!full) {
      queue_.push_back({std::move(meta), std::move(payload)});
      queued_bytes_ += bytes;
      enqueued_++;
    }
    if (full) {
      Count([](RedisStoreStats& s) { s.put_drop_queue_full++; });
      return false;
    }
  }
  Count([](RedisStoreStats& s) { s.puts_accepted++; });
  cv_.notify_all();
  return true;
}

void RedisStoreImpl::WriterLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!stopping_ && queue_.empty()) cv_.Wait(lock);
    if (queue_.empty()) return;  // stopping, and everything queued was handled
    PutJob job = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    Write(job);
    lock.Lock();
    queued_bytes_ -= job.payload->size();
    finished_++;
    cv_.notify_all();
  }
}

void RedisStoreImpl::Write(const PutJob& job) {
  const std::vector<uint8_t> value = EncodeRecord(job.meta, NowMs(), *job.payload);
  const std::string key = RedisKey(IdOf(job.meta));
  std::vector<Reply> replies;
  const LinkOutcome out = writer_link_.Run({{"SET", key, View(value)}}, &replies);
  Count([&](RedisStoreStats& s) {
    if (out == LinkOutcome::kDown) s.put_drop_down++;
    if (out == LinkOutcome::kFailed) s.put_fail_io++;
    if (out != LinkOutcome::kOk) return;
    if (IsError(replies[0])) {
      s.put_fail_rejected++;
    } else {
      s.puts_written++;
      s.bytes_written += value.size();
    }
  });
}

void RedisStoreImpl::Flush() {
  MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  while (finished_ < target) cv_.Wait(lock);
}

LinkOutcome RedisStoreImpl::RunRead(const std::vector<Command>& commands,
                                    std::vector<Reply>* replies) {
  for (auto& p : pool_) {
    if (!p->mu.try_lock()) continue;
    MutexLock lock(&p->mu, std::adopt_lock);
    return p->link.Run(commands, replies);
  }
  PooledLink& p = *pool_[next_link_++ % pool_.size()];
  MutexLock lock(&p.mu);
  return p.link.Run(commands, replies);
}

LinkOutcome RedisStoreImpl::RunGets(const std::vector<std::string>& keys, const GetSink& sink) {
  for (auto& p : pool_) {
    if (!p->mu.try_lock()) continue;
    MutexLock lock(&p->mu, std::adopt_lock);
    return p->link.RunGets(keys, sink);
  }
  PooledLink& p = *pool_[next_link_++ % pool_.size()];
  MutexLock lock(&p.mu);
  return p.link.RunGets(keys, sink);
}

Result<Record> RedisStoreImpl::Read(const Key& key, RecordKind kind) {
  const RecordId id{key, kind};
  return std::move(ReadAll({&id, 1})[0]);
}

// One pipelined round trip; each value read once, from the socket into its Record
// (RedisLink::RunGets, DecodeRecordStream), and verified as a record file is.
std::vector<Result<Record>> RedisStoreImpl::ReadAll(std::span<const RecordId> ids) {
  std::vector<std::string> keys;
  keys.reserve(ids.size());
  for (const RecordId& id : ids) keys.push_back(RedisKey(id));
  std::vector<Result<Record>> recs(ids.size(), Status::IOError("shared tier: GET failed"));
  std::vector<bool> answered(ids.size(), false);
  const LinkOutcome out = ids.empty() ? LinkOutcome::kOk
                                      : RunGets(keys, [&](size_t i, GetReply kind, BulkReader* v) {
                                          recs[i] = FromReply(ids[i], kind, v);
                                          answered[i] = true;
                                        });
  for (size_t i = 0; i < ids.size(); ++i) {
    if (answered[i]) continue;
    if (out == LinkOutcome::kDown) recs[i] = Status::IOError(kDownMessage);
    CountRead(recs[i], 0);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (recs[i].status().IsCorruption()) Remove(ids[i].key, ids[i].kind);  // never served again
  }
  return recs;
}

// What a GET answered, verified and counted.
Result<Record> RedisStoreImpl::FromReply(const RecordId& id, GetReply kind, BulkReader* value) {
  Result<Record> rec = Status::IOError("shared tier: GET failed");
  if (kind == GetReply::kNil) rec = Status::NotFound(RedisKey(id));
  if (kind == GetReply::kValue) {
    rec = DecodeRecordStream(value->length(),
                             [value](uint8_t* dst, size_t n) { return value->Read(dst, n); });
    if (rec.ok() && IdOf(rec->meta) != id) {
      rec = Status::Corruption("the value holds another record's header");
    }
    if (rec.status().IsCorruption()) {
      rec = Status::Corruption(RedisKey(id) + ": " + rec.status().message());
    }
  }
  CountRead(rec, kind == GetReply::kValue ? value->length() : 0);
  return rec;
}

void RedisStoreImpl::CountRead(const Result<Record>& rec, uint64_t bytes) {
  MutexLock lock(&stats_mu_);
  stats_.gets++;
  if (rec.ok()) {
    stats_.get_hits++;
    stats_.bytes_read += bytes;
  } else if (rec.status().code() == Status::Code::kNotFound) {
    stats_.get_not_found++;
  } else if (rec.status().IsCorruption()) {
    stats_.get_corrupt++;
  } else if (rec.status().message() == kDownMessage) {
    stats_.skipped_down++;
  } else {
    stats_.get_errors++;
  }
}

bool RedisStoreImpl::Contains(const Key& key, RecordKind kind) {
  const RecordId id{key, kind};
  return ContainsAll({&id, 1})[0];
}

std::vector<bool> RedisStoreImpl::ContainsAll(std::span<const RecordId> ids) {
  std::vector<bool> found(ids.size(), false);
  if (ids.empty()) return found;
  std::vector<std::string> keys;
  keys.reserve(ids.size());
  std::vector<Command> commands;
  for (const RecordId& id : ids) keys.push_back(RedisKey(id));
  for (const std::string& k : keys) commands.push_back({"EXISTS", k});
  std::vector<Reply> replies;
  const LinkOutcome out = RunRead(commands, &replies);
  if (out != LinkOutcome::kOk) {
    Count([&](RedisStoreStats& s) { (out == LinkOutcome::kDown ? s.skipped_down : s.get_errors)++; });
    return found;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    found[i] = replies[i]->type == REDIS_REPLY_INTEGER && replies[i]->integer == 1;
  }
  return found;
}

Status RedisStoreImpl::Remove(const Key& key, RecordKind kind) {
  std::vector<Reply> replies;
  if (RunRead({{"DEL", RedisKey({key, kind})}}, &replies) != LinkOutcome::kOk) {
    return Status::IOError("shared tier: DEL failed");
  }
  if (replies[0]->type != REDIS_REPLY_INTEGER) return Status::IOError("shared tier: DEL refused");
  return replies[0]->integer == 1 ? Status::OK() : Status::NotFound("no such record");
}

RedisStoreStats RedisStoreImpl::GetStats() {
  RedisStoreStats s;
  {
    MutexLock lock(&stats_mu_);
    s = stats_;
  }
  s.up = health_.up();
  s.downs = health_.downs();
  MutexLock lock(&mu_);
  s.queue_depth = queue_.size();
  return s;
}

// The value of "name:value" in an INFO reply ("" when absent).
std::string InfoField(std::string_view info, std::string_view name) {
  const std::string needle = "\n" + std::string(name) + ":";
  size_t at = ("\n" + std::string(info)).find(needle);
  if (at == std::string::npos) return "";
  std::string_view rest = info.substr(at + needle.size() - 1);
  return std::string(rest.substr(0, rest.find_first_of("\r\n")));
}

uint64_t InfoNumber(std::string_view info, std::string_view name) {
  std::string v = InfoField(info, name);
  return v.empty() ? 0 : std::strtoull(v.c_str(), nullptr, 10);
}

Result<RedisServerInfo> RedisStoreImpl::ServerInfo() {
  std::vector<Reply> replies;
  if (RunRead({{"INFO"}, {"DBSIZE"}}, &replies) != LinkOutcome::kOk) {
    return Status::IOError("shared tier " + name_ + " does not answer");
  }
  if (replies[0]->type != REDIS_REPLY_STRING || replies[1]->type != REDIS_REPLY_INTEGER) {
    return Status::IOError("shared tier " + name_ + ": INFO refused");
  }
  const std::string_view info(replies[0]->str, replies[0]->len);
  RedisServerInfo i;
  i.used_memory = InfoNumber(info, "used_memory");
  i.maxmemory = InfoNumber(info, "maxmemory");
  i.maxmemory_policy = InfoField(info, "maxmemory_policy");
  i.evicted_keys = InfoNumber(info, "evicted_keys");
  i.version = InfoField(info, "redis_version");
  i.keys = uint64_t(replies[1]->integer);
  return i;
}

}  // namespace

std::string RedisKey(const RecordId& id) { return "pxd:1:" + RecordFileName(id); }

Result<std::unique_ptr<RedisStore>> RedisStore::Open(const RedisStoreOptions& options) {
  PREFIXD_ASSIGN_OR_RETURN(RedisAddress a, ParseRedisUrl(options.url));
  auto store = std::make_unique<RedisStoreImpl>(options, a);
  std::vector<Reply> replies;
  store->RunRead({{"PING"}}, &replies);  // logs whether Redis is up at start
  return std::unique_ptr<RedisStore>(std::move(store));
}

}  // namespace prefixd::store
