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
//
// Thread-safety: AddressCounts is safe from any thread; the server is httplib's.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>

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
};

class ConnectionGuardedServer : public httplib::Server {
 public:
  // REQUIRES: metrics outlives the server; it counts the refusals and the cuts.
  ConnectionGuardedServer(ConnectionLimits limits, ServerMetrics* metrics)
      : limits_(limits), counts_(limits.max_per_address), metrics_(metrics) {}

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool ServeRequests(socket_t sock, const std::string& address, int port);

  const ConnectionLimits limits_;
  AddressCounts counts_;
  ServerMetrics* const metrics_;
};

}  // namespace prefixd::server
