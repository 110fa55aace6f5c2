// RedisTestServer: a real redis-server for tests, on a free loopback port (127.0.0.1 only),
// with persistence off (--save '' --appendonly no) and its own temp dir; killed (SIGKILL) and
// reaped at destruction. Every wait is bounded.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "store/store_test_util.h"

namespace prefixd::store::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

class RedisTestServer {
 public:
  // `maxmemory`: e.g. "2mb" (with allkeys-lru); "" : unbounded.
  explicit RedisTestServer(std::string maxmemory = "", int port = 0)
      : maxmemory_(std::move(maxmemory)), port_(port != 0 ? port : FreeLoopbackPort()) {}
  ~RedisTestServer() { Kill(); }

  // Starts redis-server and waits (at most 10 s) until it answers PING.
  bool Start() {
    pid_ = ::fork();
    if (pid_ == 0) Exec();
    return pid_ > 0 && WaitReady();
  }
  // kill -9, and reaps it.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // SIGSTOP / SIGCONT: a Redis that answers nothing (slow) without closing connections.
  void Pause() { ::kill(pid_, SIGSTOP); }
  void Resume() { ::kill(pid_, SIGCONT); }

  // More redis-server arguments (e.g. {"--requirepass", "pw"}); before Start().
  void AddArgs(const std::vector<std::string>& args) {
    extra_.insert(extra_.end(), args.begin(), args.end());
  }

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Runs one command on a fresh connection (binary-safe arguments); the reply as a string
  // ("" for nil), "ERR:<message>" for an error, the number for an integer.
  std::string Command(const std::vector<std::string>& args) const {
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, {1, 0});
    if (c == nullptr || c->err != 0) return c ? (redisFree(c), "ERR:connect") : "ERR:connect";
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) argv.push_back(a.data()), lens.push_back(a.size());
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), lens.data()));
    std::string out = "ERR:no reply";
    if (r != nullptr) {
      if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) out.assign(r->str, r->len);
      if (r->type == REDIS_REPLY_ERROR) out = "ERR:" + std::string(r->str, r->len);
      if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
      if (r->type == REDIS_REPLY_NIL) out = "";
      freeReplyObject(r);
    }
    redisFree(c);
    return out;
  }

 private:
  [[noreturn]] void Exec() {
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no", "--dir", dir_.path(),
                                     "--daemonize", "no", "--loglevel", "warning"};
    if (!maxmemory_.empty()) {
      args.insert(args.end(), {"--maxmemory", maxmemory_, "--maxmemory-policy", "allkeys-lru"});
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::freopen(dir_.Sub("redis.log").c_str(), "w", stdout);
    ::execvp("redis-server", argv.data());
    ::_exit(127);
  }
  bool WaitReady() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string pong = Command({"PING"});
      if (pong == "PONG" || pong.starts_with("ERR:NOAUTH")) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return false;  // it exited
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  TempDir dir_;
  std::string maxmemory_;
  std::vector<std::string> extra_;
  int port_;
  pid_t pid_ = -1;
};

// Polls `pred` every 20 ms for at most `seconds`; true as soon as it holds.
template <typename Pred>
bool Eventually(Pred pred, double seconds = 15) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace prefixd::store::testing
