#include "engine/model/devices.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>

#include "ggml-backend.h"

namespace prefixd::engine {

namespace {

// ggml-rpc's entry point, reached through its registry as llama.cpp's common does: a build
// without the RPC backend links and says so instead of failing to load.
using RpcAddServerFn = ggml_backend_reg_t (*)(const char* endpoint);

Result<RpcAddServerFn> RpcAddServer() {
  ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
  auto fn = rpc == nullptr ? nullptr
                           : reinterpret_cast<RpcAddServerFn>(ggml_backend_reg_get_proc_address(
                                 rpc, "ggml_backend_rpc_add_server"));
  if (fn == nullptr) {
    return Status::InvalidArgument(
        "--rpc: this llama.cpp build has no RPC backend (scripts/setup-llama.sh builds it with "
        "GGML_RPC=ON)");
  }
  return fn;
}

// The devices of one rpc-server, added once per process (ggml-rpc keeps one connection per
// endpoint while tensors live there). Probed when first added and again once lost (a new
// connection will be made); not while in use: an rpc-server serves one connection at a time,
// and probes queued behind it fill its listen backlog.
Result<std::vector<ggml_backend_dev_t>> RpcDevices(const std::string& endpoint) {
  static std::mutex mu;
  static std::map<std::string, std::vector<ggml_backend_dev_t>> added;
  std::lock_guard<std::mutex> lock(mu);
  auto it = added.find(endpoint);
  if (it == added.end() || RpcServerLost(endpoint)) {
    PREFIXD_RETURN_IF_ERROR(ProbeTcp(endpoint, 2000));
  }
  if (it != added.end()) return it->second;
  PREFIXD_ASSIGN_OR_RETURN(RpcAddServerFn add, RpcAddServer());
  // ggml-rpc writes with send() and no MSG_NOSIGNAL: a server that died would kill this process
  // with SIGPIPE before the loss could be reported (Model::BackendStatus).
  signal(SIGPIPE, SIG_IGN);
  ggml_backend_reg_t reg = add(endpoint.c_str());
  if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
    return Status::IOError("rpc-server at " + endpoint + " offers no device");
  }
  std::vector<ggml_backend_dev_t> devices;
  for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
    devices.push_back(ggml_backend_reg_dev_get(reg, i));
  }
  added[endpoint] = devices;
  return devices;
}

// llama.cpp's default list past the RPC servers: the GPUs, else the integrated GPUs.
std::vector<ggml_backend_dev_t> LocalAccelerators() {
  std::vector<ggml_backend_dev_t> gpus, igpus;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    const auto type = ggml_backend_dev_type(dev);
    if (type == GGML_BACKEND_DEVICE_TYPE_GPU) gpus.push_back(dev);
    if (type == GGML_BACKEND_DEVICE_TYPE_IGPU) igpus.push_back(dev);
  }
  return gpus.empty() ? igpus : gpus;
}

std::string KnownNames(const std::vector<ggml_backend_dev_t>& rpc) {
  std::string names = "none";
  for (ggml_backend_dev_t d : rpc) names += std::string(", ") + ggml_backend_dev_name(d);
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    names += std::string(", ") + ggml_backend_dev_name(ggml_backend_dev_get(i));
  }
  return names;
}

Result<ggml_backend_dev_t> FindDevice(const std::string& name,
                                      const std::vector<ggml_backend_dev_t>& rpc) {
  for (ggml_backend_dev_t d : rpc) {
    if (name == ggml_backend_dev_name(d)) return d;
  }
  if (ggml_backend_dev_t d = ggml_backend_dev_by_name(name.c_str()); d != nullptr) return d;
  return Status::InvalidArgument("--device: no device '" + name + "' (there are: " +
                                 KnownNames(rpc) + ")");
}

// HOST and PORT of "HOST:PORT" or "[V6]:PORT".
Result<std::pair<std::string, std::string>> SplitHostPort(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    return Status::InvalidArgument("'" + host_port + "' is not HOST:PORT");
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::make_pair(host, host_port.substr(colon + 1));
}

// Connects `fd` to `addr` within `timeout_ms`: 0 or the errno that stopped it.
int ConnectWithin(int fd, const addrinfo* addr, int timeout_ms) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (connect(fd, addr->ai_addr, addr->ai_addrlen) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, timeout_ms) != 1) return ETIMEDOUT;
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

using RpcServerLostFn = bool (*)(const char* endpoint);

}  // namespace

bool RpcServerLost(const std::string& endpoint) {
  static const RpcServerLostFn lost = [] {
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    return rpc == nullptr ? nullptr
                          : reinterpret_cast<RpcServerLostFn>(ggml_backend_reg_get_proc_address(
                                rpc, "ggml_backend_rpc_server_lost"));
  }();
  return lost != nullptr && lost(endpoint.c_str());
}

Status ProbeTcp(const std::string& host_port, int timeout_ms) {
  PREFIXD_ASSIGN_OR_RETURN(auto hp, SplitHostPort(host_port));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(hp.first.c_str(), hp.second.c_str(), &hints, &found); rc != 0) {
    return Status::InvalidArgument("'" + host_port + "': " + gai_strerror(rc));
  }
  int err = EHOSTUNREACH;
  for (addrinfo* a = found; a != nullptr && err != 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    err = ConnectWithin(fd, a, timeout_ms);
    close(fd);
  }
  freeaddrinfo(found);
  if (err == 0) return Status::OK();
  return Status::IOError("cannot reach rpc-server at " + host_port + ": " + std::strerror(err));
}

Result<std::optional<std::vector<ggml_backend_dev_t>>> ResolveDevices(const DeviceChoice& choice) {
  if (choice.empty()) return std::optional<std::vector<ggml_backend_dev_t>>();
  std::vector<ggml_backend_dev_t> rpc;
  for (const std::string& endpoint : choice.rpc_servers) {
    PREFIXD_ASSIGN_OR_RETURN(std::vector<ggml_backend_dev_t> devs, RpcDevices(endpoint));
    rpc.insert(rpc.end(), devs.begin(), devs.end());
  }
  std::vector<ggml_backend_dev_t> out;
  if (choice.devices.empty()) {
    out = rpc;  // llama.cpp puts RPC servers first, to move the fewest tensors over the network
    for (ggml_backend_dev_t d : LocalAccelerators()) out.push_back(d);
    return std::optional(out);
  }
  if (choice.devices.size() == 1 && choice.devices[0] == "none") return std::optional(out);
  for (const std::string& name : choice.devices) {
    PREFIXD_ASSIGN_OR_RETURN(ggml_backend_dev_t d, FindDevice(name, rpc));
    out.push_back(d);
  }
  return std::optional(out);
}

bool ComputesOffHost(const std::optional<std::vector<ggml_backend_dev_t>>& devices) {
  for (ggml_backend_dev_t d : devices ? *devices : LocalAccelerators()) {
    const auto type = ggml_backend_dev_type(d);
    if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) return true;
  }
  return false;
}

std::string DescribeDevices(const std::vector<ggml_backend_dev_t>& devices) {
  if (devices.empty()) return "CPU only";
  std::string out;
  for (ggml_backend_dev_t d : devices) {
    if (!out.empty()) out += ", ";
    out += std::string(ggml_backend_dev_name(d)) + " (" + ggml_backend_dev_description(d) + ")";
  }
  return out;
}

}  // namespace prefixd::engine
