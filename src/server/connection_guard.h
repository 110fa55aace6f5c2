// Connections that cannot hold the server: ConnectionGuardedServer serves each connection as
// cpp-httplib does (keep-alive, the same request processing), with two bounds httplib lacks:
//  - a whole-request read deadline: each request's headers and body must arrive within
//    `request_read_deadline` of its first byte, however slowly they trickle (a read timeout
//    alone restarts with every byte), and
//  - a cap on the connections open at once from one client address; one over it is answered
//    429 (rate_limit_error, Retry-After) and closed before anything is read.
// Together with a thread pool larger than the cap (server.cpp), a client that opens
// connections and trickles bytes holds at most `max_per_address` threads for at most the
// deadline each, and other clients and /health keep their threads.
// Every request then passes its FrontDoor (front_door.h) before any route runs: the server
// installs it as httplib's pre-routing step and keeps that step from being replaced.
//
// Thread-safety: AddressCounts is safe from any thread; the server is httplib's.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>

#include "server/front_door.h"
#include "server/metrics.h"
#include "util/mutex.h"

namespace prefixd::server {

// How many connections each client address has open.
class AddressCounts {
 public:
  explicit AddressCounts(size_t max_per_address) : max_(max_per_address) {}
  // Counts a new connection from `address`; false (and nothing counted) when it has `max` open
  // already. max 0: no cap.
  bool Acquire(const std::string& address);
  void Release(const std::string& address);
  size_t open(const std::string& address) const;

 private:
  const size_t max_;
  mutable Mutex mu_;
  std::unordered_map<std::string, size_t> open_ PREFIXD_GUARDED_BY(mu_);
};

struct ConnectionLimits {
  std::chrono::milliseconds request_read_deadline{60000};
  size_t max_per_address = 0;  // 0: no cap

  // From `serve`'s flags: --request-read-timeout in ms (0: no deadline but the 60 s per read)
  // and --max-connections-per-address (0: no cap).
  static ConnectionLimits Of(int request_read_timeout_ms, size_t max_per_address);
};

class ConnectionGuardedServer : public httplib::Server {
 public:
  // REQUIRES: metrics and door outlive the server; metrics counts the refusals and the cuts.
  ConnectionGuardedServer(ConnectionLimits limits, ServerMetrics* metrics, const FrontDoor* door);

  // Connection threads: `base` always, up to the per-address cap more as connections need
  // them (an address at its cap leaves every base thread to the others), and at most
  // kMaxQueuedConnections accepted connections waiting for a thread; one more is closed at
  // once rather than queued without end.
  static constexpr size_t kMaxQueuedConnections = 1024;
  void UseThreads(size_t base);

 private:
  // The front door is the pre-routing step; nothing may take its place.
  using httplib::Server::set_pre_routing_handler;

  bool process_and_close_socket(socket_t sock) override;
  bool ServeRequests(socket_t sock, const std::string& address, int port);

  const ConnectionLimits limits_;
  AddressCounts counts_;
  ServerMetrics* const metrics_;
};

}  // namespace prefixd::server
