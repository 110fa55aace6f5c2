// Devices: where a model's layers, KV cache and recurrent states live. llama.cpp's own devices
// (a GPU backend when one is built), plus ggml's RPC backend: an `rpc-server` process reached
// over TCP holds the tensors, so every state read and write crosses a backend boundary as it
// does on a GPU (docs/backends.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "util/status.h"

struct ggml_backend_device;

namespace prefixd::engine {

// What `serve --rpc` and `--device` ask for, in llama-server's words.
struct DeviceChoice {
  // HOST:PORT of each rpc-server (`--rpc a:50052,b:50052`); their devices come first in the
  // default list, as llama.cpp orders them.
  std::vector<std::string> rpc_servers;
  // Device names (`--device RPC0,CUDA0`; `none`: the CPU only). Empty: the default list.
  std::vector<std::string> devices;

  bool empty() const { return rpc_servers.empty() && devices.empty(); }
};

// The devices a model is loaded onto: nullopt for llama.cpp's default selection (no choice
// made), else the list in order (empty: the CPU only).
// Each RPC server is first reached with a plain TCP connect (2 s), so an address that does not
// answer is an IOError naming it, where ggml-rpc would abort the process. A server is added
// once per process and is not put in ggml's global registry: a model that asked for no RPC
// server never sees one. Using one ignores SIGPIPE for the process (a write to a server that
// died must be an error, not the end of the process). InvalidArgument for a device name no
// backend has (the message lists those there are), or for --rpc in a build without ggml's RPC
// backend.
// Thread-safe.
Result<std::optional<std::vector<ggml_backend_device*>>> ResolveDevices(const DeviceChoice& choice);

// Whether the rpc-server at `endpoint` was lost: it stopped answering while in use (the pinned
// llama.cpp's patch 0008 turns that from an abort into failed computes, docs/llama-patches.md).
// Stays true for the process: the tensors it held are gone. False without the RPC backend.
bool RpcServerLost(const std::string& endpoint);

// Whether layers offloaded to `devices` (ResolveDevices' answer; nullopt: llama.cpp's default
// list) compute off the host: the list holds a GPU, an integrated GPU or an RPC device.
bool ComputesOffHost(const std::optional<std::vector<ggml_backend_device*>>& devices);

// "NAME (description)" of each device, for the start log.
std::string DescribeDevices(const std::vector<ggml_backend_device*>& devices);

// Whether TCP HOST:PORT accepts a connection within `timeout_ms`. IOError naming the
// address and the error when not; InvalidArgument for an address that does not parse.
Status ProbeTcp(const std::string& host_port, int timeout_ms);

}  // namespace prefixd::engine
