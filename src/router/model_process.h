// ModelProcess: one model's own `prefixd serve`, started by the router on 127.0.0.1 with a port
// of its own. ModelLauncher starts them; the pool (model_pool.h) decides when.
//
// A process per model, as llama-server's router does: a model that crashes or fails to load
// takes only its own requests with it, and unloading gives every byte back to the system
// (weights, contexts, the RAM tier). The price is a process start per load, which the weights'
// load dwarfs.
//
// Thread-safety: a ModelProcess may be used from any thread; Launch() may be called from any
// thread (forks happen on one thread the launcher owns, because a child's parent-death signal
// follows the thread that forked it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "router/models_config.h"
#include "util/status.h"

namespace prefixd::router {

class ModelProcess {
 public:
  // Stops the process: SIGTERM (its server flushes its disk tier), SIGKILL after a grace.
  virtual ~ModelProcess() = default;
  virtual int port() const = 0;
  // False once the process has exited (it is reaped then).
  virtual bool Alive() = 0;
  // Resident memory now (VmRSS): weights paged in, contexts, its RAM tier.
  virtual uint64_t MemoryBytes() = 0;
  // How it ended, with its last log lines, once !Alive().
  virtual std::string ExitText() = 0;
  // The tokens one request may hold on it (its slot's context), as it said when it began to
  // listen; 0: it did not say.
  virtual int64_t n_ctx() const { return 0; }
};

class ModelLauncher {
 public:
  virtual ~ModelLauncher() = default;
  // Starts `spec`'s server and returns once it listens. A process that exits first (a corrupt
  // file, an unsupported arch, a bad flag) or does not listen in time is an error whose message
  // carries its last log lines.
  virtual Result<std::unique_ptr<ModelProcess>> Launch(const ModelSpec& spec) = 0;
};

struct ChildLauncherOptions {
  std::string exe;                       // the prefixd binary ("" -> /proc/self/exe)
  std::vector<std::string> common_args;  // serve flags every model gets, before its own
  std::string cache_root;                // each model's cache dir is <cache_root>/models/<id>
  std::chrono::seconds start_timeout{300};
  std::chrono::seconds stop_grace{20};   // SIGTERM to SIGKILL
};

std::unique_ptr<ModelLauncher> NewChildLauncher(ChildLauncherOptions options);

// The arguments of `spec`'s `prefixd serve` (after the program name), as NewChildLauncher runs it.
std::vector<std::string> ChildArgs(const ChildLauncherOptions& options, const ModelSpec& spec);

}  // namespace prefixd::router
