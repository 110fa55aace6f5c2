#include "server/server.h"

#include <unistd.h>

#include <httplib.h>

#include <exception>

#include "server/admission.h"
#include "server/api_messages.h"
#include "server/connection_guard.h"
#include "server/front_door.h"
#include "server/http_io.h"
#include "server/request_log.h"
#include "server/routes.h"

namespace prefixd::server {

namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "prefixd";
  return name;
}

}  // namespace

struct HttpServer::Impl {
  Impl(ServerOptions o, const TenantAuth* auth)
      : options(std::move(o)),
        door(auth, FrontDoorOptions{options.allowed_hosts, options.cors_origins},
             RouteRights{IsOpenRoute, IsAdminRoute},
             [](const httplib::Request&, httplib::Response& res, const ApiError& e) {
               SendError(res, e);  // OnError gives the Anthropic routes their shape
             }),
        http(ConnectionLimits::Of(options.request_read_timeout_ms,
                                  options.max_connections_per_address),
             &metrics, &door) {}

  ServerOptions options;
  ServerMetrics metrics;
  RecentRequests recent;
  std::atomic<bool> stopping{false};
  std::unique_ptr<Admission> admission;
  RouteContext ctx;
  FrontDoor door;  // before `http`, which runs it on every request
  ConnectionGuardedServer http;

  void SetUp();
  void OnError(const httplib::Request& req, httplib::Response& res);
  ApiError MadeUpError(const httplib::Request& req, int status) const;
  void OnResponse(const httplib::Request& req, const httplib::Response& res);
};

// Called by httplib for every response with status >= 400; gives the ones httplib made up
// itself (unknown route, body too large, unparsable request) the OpenAI error shape, and every
// error on the Anthropic routes (refused keys included) Anthropic's shape.
void HttpServer::Impl::OnError(const httplib::Request& req, httplib::Response& res) {
  if (res.body.empty()) SendError(res, MadeUpError(req, res.status));
  if (req.path.rfind("/v1/messages", 0) == 0) {
    if (auto body = AnthropicErrorFromOpenAi(res.status, res.body)) {
      res.set_content(*body, "application/json");
    }
  }
}

ApiError HttpServer::Impl::MadeUpError(const httplib::Request& req, int status) const {
  ApiError e;
  if (status == 413) {
    e = {ErrorKind::kPayloadTooLarge,
         "request body is larger than " + std::to_string(options.max_body_bytes) + " bytes", "",
         "request_too_large"};
  } else if (status == 404 && IsKnownPath(req.path)) {
    e = {ErrorKind::kMethodNotAllowed, req.method + " is not allowed on " + req.path, "", ""};
  } else if (status == 404) {
    e = {ErrorKind::kNotFound, "no route for " + req.method + " " + req.path, "", ""};
  } else if (status >= 500) {
    e = {ErrorKind::kInternal, "internal error", "", ""};
  } else {
    e = ApiError::Invalid("bad HTTP request");
  }
  return e;
}

void HttpServer::Impl::OnResponse(const httplib::Request& req, const httplib::Response& res) {
  std::string route = RouteLabel(req.path);
  double seconds = SecondsSinceRequestStart();
  metrics.RecordRequest(route, res.status, seconds);
  if (RequestLoggedByRoute()) return;
  WriteLogLine(LogLine("request")
                   .Add("method", req.method)
                   .Add("route", route)
                   .Add("status", (long long)res.status)
                   .Add("total_ms", seconds * 1000));
}

void HttpServer::Impl::SetUp() {
  http.UseThreads(options.n_http_threads);
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(60);
  http.set_write_timeout(60);
  http.set_keep_alive_timeout(5);  // an idle keep-alive connection holds a thread
  http.set_tcp_nodelay(true);
  // Called as each response is written: the handler is done with its admission place.
  http.set_post_routing_handler(
      [this](const httplib::Request&, httplib::Response& res) {
        // Which server answered: a load balancer's stickiness and a client's logs key on it.
        res.set_header("X-Prefixd-Server", options.server_name);
        admission->Release();
      });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    OnError(req, res);
  });
  // What went wrong is for the operator's log; the client learns only that something did.
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        WriteLogLine(LogLine("handler_exception").Add("route", RouteLabel(req.path))
                         .Add("what", what));
        SendError(res, {ErrorKind::kInternal, "internal error", "", ""});
      });
  http.set_logger(
      [this](const httplib::Request& req, const httplib::Response& res) { OnResponse(req, res); });
  RegisterCompletionRoutes(http, ctx);
  RegisterAgentRoutes(http, ctx);
  RegisterRenderRoutes(http, ctx);
  RegisterInfoRoutes(http, ctx);
  RegisterCacheRoutes(http, ctx);
  RegisterWebRoutes(http, ctx);
}

HttpServer::HttpServer(Backend* backend, const TenantAuth* auth, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options), auth)) {
  impl_->admission = std::make_unique<Admission>(impl_->options.max_admitted);
  impl_->ctx.backend = backend;
  impl_->ctx.auth = auth;
  impl_->ctx.metrics = &impl_->metrics;
  impl_->ctx.recent = &impl_->recent;
  impl_->ctx.stopping = &impl_->stopping;
  impl_->ctx.n_predict = impl_->options.n_predict;
  impl_->ctx.aliases = impl_->options.aliases;
  impl_->ctx.logit_bias = impl_->options.logit_bias;
  impl_->ctx.log_prompts = impl_->options.log_prompts;
  impl_->ctx.kv_event_totals = impl_->options.kv_event_totals;
  impl_->ctx.images = impl_->options.images;
  impl_->ctx.admission = impl_->admission.get();
  impl_->ctx.model_id =
      impl_->options.model_id.empty() ? backend->model_name() : impl_->options.model_id;
  impl_->SetUp();
}

HttpServer::~HttpServer() { Stop(); }

Result<int> HttpServer::Bind() {
  ServerOptions& o = impl_->options;
  int port = o.port == 0 ? impl_->http.bind_to_any_port(o.host)
                         : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0) {
    return Status::IOError("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                           " (address in use, or not a local address?)");
  }
  if (o.server_name.empty()) o.server_name = HostName() + ":" + std::to_string(port);
  return port;
}

Status HttpServer::Serve() {
  if (!impl_->http.listen_after_bind() && !impl_->stopping) {
    return Status::IOError("the HTTP server stopped unexpectedly");
  }
  return Status::OK();
}

void HttpServer::Stop() {
  impl_->stopping = true;
  impl_->http.stop();
}

const std::string& HttpServer::model_id() const { return impl_->ctx.model_id; }

}  // namespace prefixd::server
