// Test-only: a real ggml rpc-server (llama.cpp's, built by scripts/setup-llama.sh) on
// 127.0.0.1, so the engine's tensors live in another process and every state read and write
// crosses a backend boundary, as on a GPU. One per test process: an rpc-server serves one
// client process at a time, and CTest runs test cases in parallel processes.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "engine/model/devices.h"

namespace prefixd::engine::testing {

// A port no one listens on now (the kernel's pick for a bound, closed socket).
inline int FreeLocalPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Starts `bin` listening on 127.0.0.1:port with 2 CPU threads; its pid, or -1. The child dies
// with this process (PR_SET_PDEATHSIG), so a test killed by a timeout leaves no server behind.
inline pid_t SpawnRpcServer(const std::string& bin, int port) {
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(1);
  const std::string p = std::to_string(port);
  execl(bin.c_str(), bin.c_str(), "-H", "127.0.0.1", "-p", p.c_str(), "-t", "2",
        static_cast<char*>(nullptr));
  _exit(127);
}

// "127.0.0.1:PORT" of this process's rpc-server, started on first use (a few tries at a free
// port, each waited on for 10 s at most) and killed at exit; "" when none would start.
inline const std::string& TestRpcServer() {
  static std::mutex mu;
  static std::string endpoint;
  static pid_t pid = -1;
  std::lock_guard<std::mutex> lock(mu);
  if (!endpoint.empty()) return endpoint;
  for (int attempt = 0; attempt < 3 && endpoint.empty(); ++attempt) {
    const int port = FreeLocalPort();
    pid = SpawnRpcServer(PREFIXD_LLAMA_RPC_SERVER_BIN, port);
    if (pid < 0) continue;
    const std::string at = "127.0.0.1:" + std::to_string(port);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline && waitpid(pid, nullptr, WNOHANG) == 0) {
      if (ProbeTcp(at, 200).ok()) {
        endpoint = at;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (endpoint.empty()) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (!endpoint.empty()) {
    std::atexit([] {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    });
  }
  return endpoint;
}

}  // namespace prefixd::engine::testing
