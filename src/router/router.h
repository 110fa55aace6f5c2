// ModelRouter: the HTTP front of `prefixd serve --models-dir/--models`. One port for several
// models, each served by its own `prefixd serve` on loopback (model_process.h), loaded and
// unloaded by a ModelPool (model_pool.h).
//
// Routes it answers itself:
//   GET  /health                       ok while the router runs
//   GET  /v1/models, GET /models       every model with its state, memory, pin, ttl
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
// With API keys, a request needs a valid key before anything is loaded for it; the model's
// server checks the same keys again (and keeps its tenants apart as `serve -m` does).
//
// Lifecycle: Bind(), then Serve() blocks until Stop() (any thread).
#pragma once

#include <memory>
#include <string>

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
  int request_read_timeout_ms = 60000;
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
