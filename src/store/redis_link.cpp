#include "store/redis_link.h"

#include <charconv>
#include <sys/time.h>

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
