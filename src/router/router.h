// ModelRouter: the HTTP front of `prefixd serve --models-dir/--models`. One port for several
// models, each served by its own `prefixd serve` on loopback (model_process.h), loaded and
// unloaded by a ModelPool (model_pool.h).
//
// Routes it answers itself:
//   GET  /health                       ok while the router runs
//   GET  /, GET /assets/{file}         the web page, from this binary (no model loaded)
//   GET  /v1/models, GET /models       every model with its state, memory, pin, ttl, whether
//                                      it reads images and its window (as `serve -m` says
//                                      them), from its card until its server says its context
//   POST /v1/models/{id}/load|unload   (and llama-server's POST /models/load|unload with
//                                      {"model": id}); admin routes when API keys are on
//   GET  /metrics                      the router's counters, then every loaded model's page
//                                      with a model="id" label on each sample
// Everything else goes to a model's server, headers, body and streamed answer as they are.
// The model is the JSON body's "model" (POST), else the query's `model=` or an
// X-Prefixd-Model header, else the only loaded model. An unknown model is a 404 that lists the
// models; a model that fails to load is that request's 500 (the others keep serving); no room
// within the wait limit is a 503 with Retry-After; a model server that ends mid-answer is a
// 502 (or a cut stream).
//
// Every request passes the same front door as `serve -m` (server/front_door.h: Host, Origin,
// cross-site, Content-Type, keys, admin rights) before anything is parsed, loaded or
// forwarded; the request goes on with its own Host and key, so the model's server judges it
// again the same way (and keeps its tenants apart as `serve -m` does). Model lifetime (load,
// unload, metrics of every model, keep_alive shorter than configured) is an admin's right when
// keys are on (keep_alive.h). A tenant sees no model's path, port or failure log.
//
// Lifecycle: Bind(), then Serve() blocks until Stop() (any thread).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "router/model_card.h"
#include "router/model_pool.h"
#include "server/auth.h"
#include "util/status.h"

namespace prefixd::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string server_name;             // X-Prefixd-Server; "" -> "<host name>:<port>"
  size_t max_body_bytes = 32u << 20;
  size_t n_http_threads = 32;
  size_t max_connections_per_address = 32;
  int request_read_timeout_ms = 60000;  // 0: no deadline but the 60 s per read
  std::vector<std::string> allowed_hosts;  // as serve's --allowed-host (front_door.h)
  std::vector<std::string> cors_origins;   // as serve's --cors-origin
  // The longest a tenant's keep_alive may keep a model loaded (keep_alive.h); 0: a tenant's
  // keep_alive is ignored. Admins' (or everybody's, with keys off) are bounded by kMaxKeepAlive.
  std::chrono::milliseconds tenant_keep_alive_max{30 * 60 * 1000};
  // What /v1/models says of each model (by id) before its server runs (model_card.h); a model
  // without one says neither images nor a window until its server tells its context.
  std::map<std::string, ModelCard> cards;
};

class ModelRouter {
 public:
  // REQUIRES: pool and auth outlive the router.
  ModelRouter(ModelPool* pool, const server::TenantAuth* auth, RouterOptions options);
  ~ModelRouter();

  Result<int> Bind();
  Status Serve();  // REQUIRES: Bind() succeeded
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A Prometheus page with model="id" added to every sample's labels.
std::string LabelMetrics(const std::string& page, const std::string& model);

}  // namespace prefixd::router
