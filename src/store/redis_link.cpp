#include "store/redis_link.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace prefixd::store {

namespace {

timeval Millis(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

Result<int> ParseInt(std::string_view s, const char* what, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
    return Status::InvalidArgument(std::string("bad ") + what + " '" + std::string(s) + "'");
  }
  return v;
}

std::string ReplyError(const redisReply* r) {
  if (r == nullptr) return "no reply";
  if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
  return "";
}

}  // namespace

std::string RedisAddress::ToString() const {
  return "redis://" + host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

Result<RedisAddress> ParseRedisUrl(std::string_view url) {
  if (url.starts_with("rediss://")) {
    return Status::NotSupported("rediss:// (TLS): Debian's hiredis 0.14 has no TLS support");
  }
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) {
    return Status::InvalidArgument("a shared tier URL looks like redis://HOST:PORT[/DB], not '" +
                                   std::string(url) + "'");
  }
  std::string_view rest = url.substr(kScheme.size());
  RedisAddress a;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    PREFIXD_ASSIGN_OR_RETURN(a.db, ParseInt(rest.substr(slash + 1), "database", 0, 1 << 20));
    rest = rest.substr(0, slash);
  }
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    PREFIXD_ASSIGN_OR_RETURN(a.port, ParseInt(rest.substr(colon + 1), "port", 1, 65535));
    rest = rest.substr(0, colon);
  }
  if (rest.empty() || rest.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("bad host in '" + std::string(url) +
                                   "' (a password goes in --remote-cache-password-file)");
  }
  a.host = std::string(rest);
  return a;
}

RedisLink::RedisLink(RedisLinkOptions options, RemoteHealth& health)
    : options_(std::move(options)), health_(health) {}

RedisLink::~RedisLink() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

void RedisLink::Drop(const std::string& why) {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
  health_.ReportDown(why);
}

bool RedisLink::Connect() {
  if (ctx_ != nullptr && epoch_ == health_.epoch()) return true;
  if (ctx_ != nullptr) redisFree(ctx_);  // made before the tier went down: stale
  ctx_ = nullptr;
  if (!health_.MayConnect()) return false;
  epoch_ = health_.epoch();
  const RedisAddress& a = options_.address;
  ctx_ = redisConnectWithTimeout(a.host.c_str(), a.port, Millis(options_.connect_timeout_ms));
  if (ctx_ == nullptr || ctx_->err != 0) {
    Drop(ctx_ == nullptr ? "cannot allocate a connection" : ctx_->errstr);
    return false;
  }
  if (redisSetTimeout(ctx_, Millis(options_.command_timeout_ms)) != REDIS_OK) {
    Drop("cannot set the command timeout");
    return false;
  }
  return Setup();
}

// AUTH and SELECT on a new connection.
bool RedisLink::Setup() {
  std::vector<Command> setup;
  const std::string db = std::to_string(options_.address.db);
  if (!options_.password.empty()) setup.push_back({"AUTH", options_.password});
  setup.push_back({"SELECT", db});
  for (const Command& c : setup) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (std::string_view s : c) argv.push_back(s.data()), lens.push_back(s.size());
    Reply r(static_cast<redisReply*>(redisCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data())));
    if (!r) {
      Drop(ctx_->errstr);
      return false;
    }
    if (std::string err = ReplyError(r.get()); !err.empty()) {
      Drop(std::string(c[0]) + ": " + err);
      return false;
    }
  }
  health_.ReportUp();
  return true;
}

LinkOutcome RedisLink::Run(const std::vector<Command>& commands, std::vector<Reply>* replies) {
  replies->clear();
  if (!Connect()) return LinkOutcome::kDown;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const Command& c : commands) {
    argv.clear(), lens.clear();
    for (std::string_view s : c) argv.push_back(s.data()), lens.push_back(s.size());
    if (redisAppendCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      Drop(ctx_->errstr);
      return LinkOutcome::kFailed;
    }
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK || r == nullptr) {
      replies->clear();
      Drop(ctx_->err != 0 ? ctx_->errstr : "no reply");
      return LinkOutcome::kFailed;
    }
    replies->emplace_back(static_cast<redisReply*>(r));
  }
  health_.ReportUp();
  return LinkOutcome::kOk;
}

}  // namespace prefixd::store

namespace prefixd::store {

// Reads RESP replies straight off the connection's socket, past hiredis's reader (which grows
// one buffer a megabyte at a time and copies a value into a reply object): lines through a
// small buffer, a value's bytes from what the buffer holds and then with recv() straight into
// the consumer's memory. The socket is hiredis's, blocking with its command timeout.
class RedisLink::SocketReader final : public BulkReader {
 public:
  explicit SocketReader(int fd) : fd_(fd) {}

  // One line without its CRLF. False on a failed or timed-out read, or a line over 64 KiB.
  bool Line(std::string* line) {
    line->clear();
    for (;;) {
      for (; pos_ < len_; ++pos_) {
        if (buf_[pos_] == '\n' && !line->empty() && line->back() == '\r') {
          ++pos_;
          line->pop_back();
          return true;
        }
        line->push_back(buf_[pos_]);
      }
      if (line->size() > kBuffer || !Fill()) return false;
    }
  }
  void Start(size_t length) { left_ = length; total_ = length; }
  size_t length() const override { return total_; }
  bool Read(uint8_t* dst, size_t n) override {
    if (n > left_) return false;
    left_ -= n;
    const size_t buffered = std::min(n, len_ - pos_);
    std::memcpy(dst, buf_.data() + pos_, buffered);
    pos_ += buffered;
    for (size_t got = buffered; got < n;) {
      const ssize_t r = ::recv(fd_, dst + got, n - got, 0);
      if (r <= 0 && !(r < 0 && errno == EINTR)) return false;
      if (r > 0) got += size_t(r);
    }
    return true;
  }
  // Skips what the consumer left of the value, and its CRLF.
  bool Finish() {
    std::vector<uint8_t> scratch(std::min<size_t>(left_, kBuffer));
    while (left_ > 0) {
      if (!Read(scratch.data(), std::min(left_, scratch.size()))) return false;
    }
    uint8_t crlf[2];
    left_ = 2;
    return Read(crlf, 2) && crlf[0] == '\r' && crlf[1] == '\n';
  }

 private:
  static constexpr size_t kBuffer = 64 << 10;
  bool Fill() {
    for (;;) {
      const ssize_t r = ::recv(fd_, buf_.data(), buf_.size(), 0);
      if (r > 0) return pos_ = 0, len_ = size_t(r), true;
      if (r == 0 || errno != EINTR) return false;
    }
  }
  int fd_;
  std::vector<char> buf_ = std::vector<char>(kBuffer);
  size_t pos_ = 0, len_ = 0;
  size_t left_ = 0, total_ = 0;
};

// Writes what hiredis holds of the pipeline's commands.
bool RedisLink::Flush() {
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return false;
  }
  return true;
}

// How many GETs are in flight at once, by the size of the last value. Many at once make Redis
// build every reply in its output buffer before the first leaves: for values of megabytes (a
// restore's rows and Snapshots) measured 2-3x slower than one at a time, while small values
// gain from not waiting a round trip each (bench/remote_read_bench.cpp).
constexpr size_t kGetsInFlightSmall = 8;
constexpr size_t kLargeValueBytes = 256 << 10;

LinkOutcome RedisLink::RunGets(const std::vector<std::string>& keys, const GetSink& sink) {
  if (!Connect()) return LinkOutcome::kDown;
  size_t sent = 0;
  auto send_upto = [&](size_t n) {
    for (; sent < std::min(n, keys.size()); ++sent) {
      const char* argv[] = {"GET", keys[sent].data()};
      const size_t lens[] = {3, keys[sent].size()};
      if (redisAppendCommandArgv(ctx_, 2, argv, lens) != REDIS_OK) return false;
    }
    return Flush();
  };
  size_t window = 1;  // until the first value says how large they are
  if (!send_upto(window)) {
    Drop(ctx_->err != 0 ? ctx_->errstr : "write failed");
    return LinkOutcome::kFailed;
  }
  SocketReader in(ctx_->fd);
  std::string line;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!send_upto(i + window)) return Drop("shared tier: write failed"), LinkOutcome::kFailed;
    if (!in.Line(&line) || line.empty()) return Drop("shared tier: no reply to GET"), LinkOutcome::kFailed;
    if (line[0] == '-') {
      sink(i, GetReply::kError, nullptr);
      continue;
    }
    size_t n = 0;
    auto [end, ec] = std::from_chars(line.data() + 1, line.data() + line.size(), n);
    if (line == "$-1") {
      sink(i, GetReply::kNil, nullptr);
      continue;
    }
    if (line[0] != '$' || ec != std::errc() || end != line.data() + line.size()) {
      Drop("shared tier: not a GET's reply: " + line.substr(0, 32));
      return LinkOutcome::kFailed;
    }
    in.Start(n);
    window = n < kLargeValueBytes ? kGetsInFlightSmall : 1;
    sink(i, GetReply::kValue, &in);
    if (!in.Finish()) return Drop("shared tier: a value was cut short"), LinkOutcome::kFailed;
  }
  health_.ReportUp();
  return LinkOutcome::kOk;
}

}  // namespace prefixd::store
