// HttpServer: prefixd's OpenAI-compatible HTTP server over a Backend.
//
// Sets up cpp-httplib: the routes (routes.h), the front door before routing (front_door.h: the
// browser checks, keys and rights, as the router runs them; /health and the web page's files
// need no key), an early 503 for generation requests
// beyond ServerOptions::max_admitted (admission.h), a body-size limit (413), OpenAI-shaped errors
// for unknown routes (404), wrong methods (405) and handler exceptions (500), a thread pool
// large enough for every slot and queued request plus a few spare threads for /health and
// /metrics, and per-request metrics and log lines.
//
// Lifecycle: Bind(), then Serve() blocks until Stop(). Stop() may be called from any thread;
// it cancels running completions at their next token and makes Serve() return.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/auth.h"
#include "server/backend.h"
#include "server/image_part.h"
#include "server/metrics.h"
#include "util/status.h"

namespace httplib {
class Server;
}

namespace prefixd::server {

// An alias with *, ? or [ is a pattern (fnmatch(3)): `--alias local,claude-*` serves every
// model name Claude Code asks for.
bool IsModelPattern(const std::string& alias);

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port (Bind() says which)
  size_t max_body_bytes = 32u << 20;     // larger request bodies get 413
  std::string model_id;                  // "" -> the backend's model_name()
  // The KV-event stream's counts for /metrics (prefixd_kv_events_total); null: no stream.
  std::function<KvEventTotals()> kv_event_totals;
  // Every response's X-Prefixd-Server header: which server of a fleet answered.
  // "" -> "<host name>:<bound port>" (set by Bind()).
  std::string server_name;
  // More names requests may give the same model (an agent's small-fast model name, say):
  // /v1/models lists each, a response names the one asked for. A name with *, ? or [ is a
  // pattern (IsModelPattern): `claude-*` serves every name Claude Code asks for.
  std::vector<std::string> aliases;
  // Added to the logits of every request for these tokens, under the request's own
  // logit_bias (llama-server's --logit-bias). REQUIRES: ids below the model's vocabulary.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Whether the text around a prompt's divergence point goes into the log lines and
  // /v1/requests/recent (`diverged`): prompt text of every tenant, so off unless asked for;
  // the position (`diverged_at`) is always there.
  bool log_prompts = false;
  // Host names requests may name besides IP literals and localhost (browser_guard.h).
  std::vector<std::string> allowed_hosts;
  // Origins whose pages may call the API from a browser (CORS; browser_guard.h). None: no
  // other origin may.
  std::vector<std::string> cors_origins;
  size_t n_http_threads = 16;            // connection threads; keep >= slots + queue + 4
  // A request's headers and body arrive within this of its first byte, or it is cut
  // (connection_guard.h). 0: no deadline but the 60 s per read.
  int request_read_timeout_ms = 60000;
  // Connections one client address may have open at once; more get 429. The thread pool grows
  // by as many, so one address never holds the threads others need. 0: no cap.
  size_t max_connections_per_address = 32;
  // Generation requests parsed, rendered, queued or running at once; more get 503 before they
  // are parsed (admission.h). 0: no limit. serve sets slots + max queue.
  size_t max_admitted = 0;
  // The most tokens one request generates (llama-server's -n): a larger max_tokens, or none,
  // is lowered to it. 0: no cap but the context.
  int n_predict = 0;
  // What an image in a request becomes for this model, which reads none (serve --images), and
  // the limits every image is checked against (image_part.h).
  ImageOptions images;
};

class HttpServer {
 public:
  // REQUIRES: backend and auth outlive the server.
  HttpServer(Backend* backend, const TenantAuth* auth, ServerOptions options);
  ~HttpServer();

  // Binds the listening socket; returns the port.
  Result<int> Bind();
  // Serves until Stop(). REQUIRES: Bind() succeeded.
  Status Serve();
  void Stop();

  const std::string& model_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::server
