#include "server/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "server/api_error.h"
#include "server/http_io.h"
#include "server/request_log.h"

namespace prefixd::server {

ConnectionLimits ConnectionLimits::Of(int request_read_timeout_ms, size_t max_per_address) {
  ConnectionLimits l;
  l.request_read_deadline = request_read_timeout_ms > 0
                                ? std::chrono::milliseconds(request_read_timeout_ms)
                                : std::chrono::milliseconds(std::chrono::hours(24 * 365));
  l.max_per_address = max_per_address;
  return l;
}

ConnectionGuardedServer::ConnectionGuardedServer(ConnectionLimits limits, ServerMetrics* metrics,
                                                 const FrontDoor* door)
    : limits_(limits), counts_(limits.max_per_address), metrics_(metrics) {
  httplib::Server::set_pre_routing_handler(
      [door](const httplib::Request& req, httplib::Response& res) {
        MarkRequestStart();
        return door->Check(req, res) == FrontDoor::Verdict::kPass
                   ? httplib::Server::HandlerResponse::Unhandled
                   : httplib::Server::HandlerResponse::Handled;
      });
}

bool AddressCounts::Acquire(const std::string& address) {
  MutexLock lock(&mu_);
  size_t& n = open_[address];
  if (max_ != 0 && n >= max_) {
    if (n == 0) open_.erase(address);
    return false;
  }
  ++n;
  return true;
}

void AddressCounts::Release(const std::string& address) {
  MutexLock lock(&mu_);
  auto it = open_.find(address);
  if (it == open_.end()) return;
  if (--it->second == 0) open_.erase(it);
}

size_t AddressCounts::open(const std::string& address) const {
  MutexLock lock(&mu_);
  auto it = open_.find(address);
  return it == open_.end() ? 0 : it->second;
}

namespace {

using Clock = std::chrono::steady_clock;

// poll() for `events` up to `ms` (retried on EINTR): > 0 ready, 0 timed out, < 0 an error.
int PollFor(socket_t fd, short events, int ms) {
  pollfd p{fd, events, 0};
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(ms);
  while (true) {
    int r = ::poll(&p, 1, ms);
    if (r >= 0 || errno != EINTR) return r;
    ms = int(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      until - Clock::now()).count()));
  }
}

void AddressOf(const sockaddr_storage& a, std::string* ip, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof(buf));
    *port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof(buf));
    *port = ntohs(v6.sin6_port);
  }
  *ip = buf;
}

// One end of a connection: getpeername (the client's) or getsockname (ours).
void EndOf(int (*get)(int, sockaddr*, socklen_t*), socket_t fd, std::string* ip, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  *port = 0;
  ip->clear();
  if (get(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) AddressOf(a, ip, port);
}
void PeerOf(socket_t fd, std::string* ip, int* port) { EndOf(&getpeername, fd, ip, port); }
void LocalOf(socket_t fd, std::string* ip, int* port) { EndOf(&getsockname, fd, ip, port); }

// httplib's socket stream with a deadline on reads: a request's reads fail once its deadline
// has passed, however often bytes arrived before it. The buffer lives as long as the
// connection, so bytes of a pipelined next request are kept for it.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t fd, time_t read_timeout_s, time_t write_timeout_s)
      : fd_(fd), read_ms_(int(read_timeout_s * 1000)), write_ms_(int(write_timeout_s * 1000)),
        buf_(kBufferBytes) {}

  void StartRequest(Clock::time_point deadline) {
    deadline_ = deadline;
    started_ = Clock::now();
    expired_ = false;
  }
  bool expired() const { return expired_; }

  bool is_readable() const override { return off_ < size_; }
  bool wait_readable() const override {
    const int left = MillisLeft();
    if (left > 0) {
      const int r = PollFor(fd_, POLLIN, std::min(read_ms_, left));
      if (r != 0) return r > 0;
    }
    if (MillisLeft() <= 0) expired_ = true;
    return false;
  }
  bool wait_writable() const override { return PollFor(fd_, POLLOUT, write_ms_) > 0; }
  bool is_peer_alive() const override {
    if (PollFor(fd_, POLLIN, 0) == 0) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ < size_) {
      const size_t n = std::min(size, size_ - off_);
      std::memcpy(ptr, buf_.data() + off_, n);
      off_ += n;
      return ssize_t(n);
    }
    if (!wait_readable()) {
      error_ = httplib::Error::Timeout;
      return -1;
    }
    off_ = size_ = 0;
    const bool direct = size >= buf_.size();
    const ssize_t n = ::recv(fd_, direct ? ptr : buf_.data(), direct ? size : buf_.size(), 0);
    if (n <= 0) {
      error_ = n == 0 ? httplib::Error::ConnectionClosed : httplib::Error::Read;
      return n;
    }
    if (direct) return n;
    size_ = size_t(n);
    return read(ptr, size);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!wait_writable()) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { PeerOf(fd_, &ip, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { LocalOf(fd_, &ip, &port); }
  socket_t socket() const override { return fd_; }
  time_t duration() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
  }
  void set_read_timeout(time_t sec, time_t usec) override {
    read_ms_ = int(sec * 1000 + usec / 1000);
  }
  const char* buffered_data(size_t& size) const override {
    size = size_ - off_;
    return size ? buf_.data() + off_ : nullptr;
  }
  void consume_buffered(size_t size) override { off_ += std::min(size, size_ - off_); }

 private:
  static constexpr size_t kBufferBytes = 4096;

  int MillisLeft() const {
    return int(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count(),
        0, int64_t(1) << 30));
  }

  const socket_t fd_;
  int read_ms_;
  const int write_ms_;
  std::vector<char> buf_;
  size_t off_ = 0, size_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
  Clock::time_point started_ = Clock::now();
  mutable bool expired_ = false;
};

// The answer to a connection over the cap: written at once, nothing read.
void RefuseConnection(socket_t fd, size_t cap) {
  const ApiError e{ErrorKind::kTooManyConnections,
                   "too many connections from this address (" + std::to_string(cap) +
                       " open; --max-connections-per-address): close one and retry",
                   "", "too_many_connections"};
  const std::string body = ErrorBody(e);
  const std::string head = "HTTP/1.1 " + std::to_string(HttpStatusOf(e.kind)) +
                           " Too Many Requests\r\nContent-Type: application/json\r\n"
                           "Retry-After: " + std::to_string(RetryAfterSecondsOf(e.kind)) +
                           "\r\nConnection: close\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n";
  const std::string all = head + body;
  if (PollFor(fd, POLLOUT, 1000) > 0) (void)::send(fd, all.data(), all.size(), MSG_NOSIGNAL);
}

// Waits up to `timeout_s` for the next request's first byte, watching for the server's stop.
bool NextRequestArrives(const std::atomic<socket_t>& listener, socket_t fd, time_t timeout_s,
                        const DeadlineStream& strm) {
  if (strm.is_readable()) return true;
  const Clock::time_point until = Clock::now() + std::chrono::seconds(timeout_s);
  while (listener != INVALID_SOCKET) {
    const int r = PollFor(fd, POLLIN, 100);
    if (r != 0) return r > 0;
    if (Clock::now() >= until) return false;
  }
  return false;
}

// Sends what is left, stops reading, and closes: the peer sees the whole answer, then EOF.
void CloseGracefully(socket_t fd) {
  ::shutdown(fd, SHUT_WR);
  char sink[1024];
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < until && PollFor(fd, POLLIN, 50) > 0 &&
         ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
  ::close(fd);
}

}  // namespace

void ConnectionGuardedServer::UseThreads(size_t base) {
  const size_t max = base + limits_.max_per_address;
  new_task_queue = [base, max] {
    return new httplib::ThreadPool(base, max, kMaxQueuedConnections);
  };
}

bool ConnectionGuardedServer::process_and_close_socket(socket_t sock) {
  std::string address;
  int port = 0;
  PeerOf(sock, &address, &port);
  if (!counts_.Acquire(address)) {
    metrics_->RecordConnectionRefused();
    WriteLogLine(LogLine("connection_refused").Add("address", address)
                     .Add("open", (long long)counts_.open(address)));
    RefuseConnection(sock, limits_.max_per_address);
    CloseGracefully(sock);
    return false;
  }
  const bool ok = serve_guarded([&] { return ServeRequests(sock, address, port); });
  counts_.Release(address);
  CloseGracefully(sock);
  return ok;
}

// httplib's keep-alive loop (process_server_socket_core) over a DeadlineStream.
bool ConnectionGuardedServer::ServeRequests(socket_t sock, const std::string& address, int port) {
  std::string local;
  int local_port = 0;
  LocalOf(sock, &local, &local_port);
  DeadlineStream strm(sock, read_timeout_sec_, write_timeout_sec_);
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0; --left) {
    if (!NextRequestArrives(svr_sock_, sock, keep_alive_timeout_sec_, strm)) break;
    strm.StartRequest(Clock::now() + limits_.request_read_deadline);
    bool closed = false;
    ok = process_request(strm, address, port, local, local_port, left == 1, closed, nullptr);
    if (strm.expired()) {
      metrics_->RecordReadDeadlineCut();
      WriteLogLine(LogLine("request_read_deadline").Add("address", address)
                       .Add("deadline_ms", (long long)limits_.request_read_deadline.count()));
      break;
    }
    if (!ok || closed) break;
  }
  return ok;
}

}  // namespace prefixd::server
