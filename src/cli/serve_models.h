// serve in router mode (--models-dir / --models): the flags that belong to the router, and the
// rest of the command line, which every model's own server gets.
#pragma once

#include <string>
#include <vector>

#include "router/model_card.h"

namespace prefixd::cli {

struct RouterArgs {
  std::string models_dir;
  std::string models_file;
  int64_t models_max = 0;
  std::string models_memory = "0";
  int64_t models_ttl_s = 0;
  int64_t models_wait_s = 120;
  int64_t models_keep_alive_max_s = 1800;  // RouterOptions::tenant_keep_alive_max
};

// Whether argv[first..argc) asks for router mode.
bool WantsRouter(const RouterArgs& r);

// argv[first..argc) without the flags the router keeps for itself (its address, cache dir,
// names and the --models* flags): what each model's server is started with.
std::vector<std::string> ChildCommonArgs(int argc, char** argv, int first);

struct RouterServeArgs {
  RouterArgs router;
  std::string host;
  int port = 0;
  std::string server_name;
  std::string cache_dir;      // "" -> the default dir
  std::string api_key_file;
  std::string admin_key_file;
  size_t max_body_bytes = 0;
  size_t max_connections_per_address = 0;
  int request_read_timeout_ms = 0;
  std::vector<std::string> allowed_hosts;
  std::vector<std::string> cors_origins;
  std::vector<std::string> child_args;
  router::CardDefaults card_defaults;  // the command line's --ctx and -n, as every child gets them
};

// Runs the router until SIGINT/SIGTERM; the process exit code.
int ServeRouter(const RouterServeArgs& a);

}  // namespace prefixd::cli
