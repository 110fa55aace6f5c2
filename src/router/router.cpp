#include "router/router.h"

#include <unistd.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "router/proxy.h"
#include "router/keep_alive.h"
#include "server/api_json.h"
#include "server/api_messages.h"
#include "server/browser_guard.h"
#include "server/connection_guard.h"
#include "server/front_door.h"
#include "server/routes.h"
#include "server/web_assets.h"
#include "server/http_io.h"
#include "server/metrics.h"
#include "server/model_window.h"
#include "server/request_log.h"

namespace prefixd::router {

namespace {

using json = nlohmann::json;
using server::ApiError;
using server::ErrorKind;

// A failed load's message quotes its server's last log lines, which may hold another tenant's
// request: for admins only.
ApiError ApiErrorOf(const Status& st, bool admin = true) {
  switch (st.code()) {
    case Status::Code::kNotFound:
      return {ErrorKind::kModelNotFound, st.message(), "model", "model_not_found"};
    case Status::Code::kAborted: return {ErrorKind::kConflict, st.message(), "", "model_busy"};
    case Status::Code::kResourceExhausted:
      return {ErrorKind::kOverloaded, st.message(), "", "model_no_room"};
    default:
      return {ErrorKind::kInternal,
              admin ? st.message() : "the model's server failed to start (an admin sees why)", "",
              "model_load_failed"};
  }
}

// Whether it reads images, and its window under every name `serve -m` gives it (routes_info):
// its server's context once it said one, else its card's; no window while neither knows.
void AddCard(json& j, const ModelView& v, const ModelCard& card) {
  j["input_modalities"] =
      card.reads_images ? json::array({"text", "image"}) : json::array({"text"});
  const int64_t n_ctx = v.n_ctx > 0 ? v.n_ctx : card.n_ctx;
  if (n_ctx <= 0) return;
  const server::ModelWindow w = server::ModelWindowOf(n_ctx, card.n_predict);
  j["max_input_tokens"] = w.context;
  j["max_tokens"] = w.max_output;
  for (const char* name : {"context_window", "context_length", "max_model_len"}) {
    j[name] = w.context;
  }
}

// A model as /v1/models shows it. Where it lives (file, port) and why it last failed (its
// server's log lines, which may quote another tenant's request) are the operator's: a tenant
// learns only that it failed.
json ViewJson(const ModelView& v, const ModelCard& card, bool admin) {
  json j = {{"id", v.id},
          {"object", "model"},
          {"owned_by", "prefixd"},
          {"created", 0},
          {"type", "model"},
          {"display_name", v.id},
          {"created_at", "1970-01-01T00:00:00Z"},
          {"aliases", v.aliases},
          {"path", v.path},
          {"status", {{"value", ModelStateName(v.state)}}},
          {"state", ModelStateName(v.state)},
          {"pinned", v.pinned},
          {"ttl_s", v.ttl_s},
          {"in_flight", v.in_flight},
          {"memory_bytes", v.memory_bytes},
          {"port", v.port},
          {"loads", v.loads},
          {"idle_ms", v.idle_ms},
          {"last_error", v.last_error.empty() ? json() : json(v.last_error)}};
  AddCard(j, v, card);
  if (!admin) {
    j.erase("path");
    j.erase("port");
    if (!v.last_error.empty()) j["last_error"] = "the model's server failed (an admin sees why)";
  }
  return j;
}

// Prometheus families merged from several pages: each family's HELP/TYPE once, then every
// page's samples of it, in the order families first appear.
class MetricFamilies {
 public:
  void Add(const std::string& page) {
    std::string family;
    size_t begin = 0;
    while (begin < page.size()) {
      size_t end = page.find('\n', begin);
      if (end == std::string::npos) end = page.size();
      const std::string line = page.substr(begin, end - begin);
      begin = end + 1;
      if (line.empty()) continue;
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        family = line.substr(7, line.find(' ', 7) - 7);
        Family& f = Get(family);
        if (f.seen_headers.insert(line.substr(2, 4)).second) f.headers += line + "\n";
        continue;
      }
      if (line[0] == '#') continue;
      const std::string name = line.substr(0, line.find_first_of("{ "));
      if (family.empty() || name.rfind(family, 0) != 0) family = name;
      Get(family).samples += line + "\n";
    }
  }
  std::string Render() const {
    std::string out;
    for (const std::string& name : order_) {
      const Family& f = families_.at(name);
      out += f.headers + f.samples;
    }
    return out;
  }

 private:
  struct Family {
    std::set<std::string> seen_headers;
    std::string headers;
    std::string samples;
  };
  Family& Get(const std::string& name) {
    auto [it, added] = families_.try_emplace(name);
    if (added) order_.push_back(name);
    return it->second;
  }
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

std::string RouterMetrics(const ModelPool& pool) {
  const PoolCounters c = pool.counters();
  std::string out;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
           " " + std::to_string(v) + "\n";
  };
  counter("prefixd_router_loads_total", "Model servers started.", c.loads);
  counter("prefixd_router_load_failures_total", "Model loads that failed.", c.load_failures);
  counter("prefixd_router_evictions_total", "Models unloaded to make room.", c.evictions);
  counter("prefixd_router_idle_unloads_total", "Models unloaded after their ttl.", c.idle_unloads);
  counter("prefixd_router_crashes_total", "Model servers found ended.", c.crashes);
  out += "# HELP prefixd_router_model_loaded 1 while the model's server runs.\n"
         "# TYPE prefixd_router_model_loaded gauge\n";
  std::string memory = "# HELP prefixd_router_model_memory_bytes Resident memory of the model's "
                       "server, last measured.\n# TYPE prefixd_router_model_memory_bytes gauge\n";
  std::string flight = "# HELP prefixd_router_model_in_flight Requests forwarded and not ended.\n"
                       "# TYPE prefixd_router_model_in_flight gauge\n";
  for (const ModelView& v : pool.List()) {
    const std::string label = "{model=\"" + v.id + "\"} ";
    out += "prefixd_router_model_loaded" + label + (v.state == ModelState::kLoaded ? "1" : "0") +
           "\n";
    memory += "prefixd_router_model_memory_bytes" + label + std::to_string(v.memory_bytes) + "\n";
    flight += "prefixd_router_model_in_flight" + label + std::to_string(v.in_flight) + "\n";
  }
  return out + memory + flight;
}

// Errors in the shape of the API the request spoke: Anthropic's for /v1/messages.
void SendRouterError(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
  if (req.path.rfind("/v1/messages", 0) == 0) {
    server::SendErrorBody(res, error, server::AnthropicErrorBody(error));
  } else {
    server::SendError(res, error);
  }
}

std::string HostName() {
  char buf[256] = {0};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : "localhost";
}

}  // namespace

std::string LabelMetrics(const std::string& page, const std::string& model) {
  const std::string label = "model=\"" + model + "\"";
  std::string out;
  size_t begin = 0;
  while (begin < page.size()) {
    size_t end = page.find('\n', begin);
    if (end == std::string::npos) end = page.size();
    std::string line = page.substr(begin, end - begin);
    begin = end + 1;
    if (!line.empty() && line[0] != '#') {
      const size_t brace = line.find('{');
      const size_t space = line.find(' ');
      if (brace != std::string::npos && brace < space) {
        line.insert(brace + 1, line[brace + 1] == '}' ? label : label + ",");
      } else if (space != std::string::npos) {
        line.insert(space, "{" + label + "}");
      }
    }
    out += line + "\n";
  }
  return out;
}

// The router's own open routes: /health, and the web page's files, which it serves itself
// (loading no model); the page's API calls name their model and need a key like any other.
bool RouterIsOpen(const std::string& path) {
  return path == "/health" || path == "/" || path.rfind("/assets/", 0) == 0;
}

// Model lifetime is an admin's; so are the model servers' own admin routes (they check again
// with the same key) and the metrics of every model.
bool RouterIsAdmin(const std::string& method, const std::string& path) {
  if (method == "POST" && (path.rfind("/v1/models/", 0) == 0 || path == "/models/load" ||
                           path == "/models/unload")) {
    return true;
  }
  return server::IsAdminRoute(method, path);
}

struct ModelRouter::Impl {
  Impl(ModelPool* p, const server::TenantAuth* a, RouterOptions o)
      : pool(p), options(std::move(o)),
        door(a, server::FrontDoorOptions{options.allowed_hosts, options.cors_origins},
             server::RouteRights{RouterIsOpen, RouterIsAdmin}, SendRouterError),
        http(server::ConnectionLimits::Of(options.request_read_timeout_ms,
                                          options.max_connections_per_address),
             &metrics, &door) {}

  ModelPool* const pool;
  RouterOptions options;
  server::ServerMetrics metrics;  // counts the connection guard's refusals
  server::FrontDoor door;         // before `http`, which runs it on every request
  server::ConnectionGuardedServer http;
  std::atomic<bool> stopping{false};
  std::thread ticker;

  bool IsAdmin(const httplib::Request& req) const { return door.TenantOf(req).admin; }

  // The model a forwarded request names and how long it asks the model to stay; a name ""
  // with `res` set when it names none (or asks wrongly). The body is parsed only after the
  // front door let the request in, and only when it nests no deeper than the model's server
  // would accept.
  struct Target {
    std::string model;
    KeepAlive keep_alive;
  };
  Target TargetOf(const httplib::Request& req, httplib::Response& res) const {
    Target t;
    if (req.method == "POST" && !req.body.empty()) {
      if (!server::api_json::DepthWithin(req.body, server::api_json::kMaxRequestDepth)) {
        SendRouterError(req, res, ApiError::Invalid(
            "request body nests deeper than " +
            std::to_string(server::api_json::kMaxRequestDepth)));
        return {};
      }
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_object()) {
        if (body.contains("model") && body["model"].is_string()) t.model = body["model"];
        Result<KeepAlive> asked = ParseKeepAlive(body);
        if (!asked.ok()) {
          SendRouterError(req, res, ApiError::Invalid(asked.status().message(), "keep_alive"));
          return {};
        }
        t.keep_alive = KeepAliveFor(*asked, IsAdmin(req), options.tenant_keep_alive_max);
      }
    }
    if (t.model.empty()) t.model = ModelOfQuery(req);
    if (t.model.empty()) t.model = OnlyLoaded();
    if (t.model.empty()) {
      SendRouterError(req, res, ApiError::Invalid("name a model: the body's \"model\", ?model=ID "
                                               "or an X-Prefixd-Model header (GET /v1/models "
                                               "lists them)",
                                               "model"));
    }
    return t;
  }

  // ?model=, the X-Prefixd-Model header, or the page's own ?model= (its Referer): the web page
  // opened as /?model=ID asks its API calls of the same model.
  static std::string ModelOfQuery(const httplib::Request& req) {
    if (req.has_param("model")) return req.get_param_value("model");
    if (req.has_header("X-Prefixd-Model")) return req.get_header_value("X-Prefixd-Model");
    const std::string referer = req.get_header_value("Referer");
    const size_t q = referer.find_first_of("?&", referer.find("://") + 3);
    for (size_t at = q; at != std::string::npos; at = referer.find('&', at + 1)) {
      if (referer.compare(at + 1, 6, "model=") == 0) {
        const size_t end = referer.find_first_of("&#", at + 7);
        return httplib::decode_query_component(referer.substr(at + 7, end - at - 7));
      }
    }
    return "";
  }

  std::string OnlyLoaded() const {
    std::string only;
    for (const ModelView& v : pool->List()) {
      if (v.state != ModelState::kLoaded) continue;
      if (!only.empty()) return "";
      only = v.id;
    }
    return only;
  }

  void ForwardRoute(const httplib::Request& req, httplib::Response& res) {
    const Target target = TargetOf(req, res);
    if (target.model.empty()) return;
    for (int attempt = 0;; ++attempt) {
      Result<ModelPool::Lease> lease = pool->Acquire(target.model, target.keep_alive);
      if (!lease.ok()) {
        SendRouterError(req, res, ApiErrorOf(lease.status(), IsAdmin(req)));
        return;
      }
      const int port = lease->port();
      const std::string why = Forward(req, res, std::move(*lease), options.server_name);
      if (why.empty()) return;
      // No answer at all: a server that has just ended (kill -9, a crash the pool has not seen
      // yet) is loaded again and the request sent once more; one that runs is a 502.
      if (attempt == 0 && pool->NoticeEnd(target.model, port, std::chrono::seconds(2))) continue;
      SendRouterError(req, res, {ErrorKind::kBadGateway,
                                 "model " + target.model + "'s server gave no answer: " + why, "",
                                 "model_server_failed"});
      return;
    }
  }

  ModelCard CardFor(const std::string& id) const {
    auto it = options.cards.find(id);
    return it == options.cards.end() ? ModelCard() : it->second;
  }

  void SendModel(const httplib::Request& req, httplib::Response& res, const std::string& name) {
    Result<std::string> id = pool->Resolve(name);
    if (!id.ok()) return SendRouterError(req, res, ApiErrorOf(id.status()));
    for (const ModelView& v : pool->List()) {
      if (v.id == *id) server::SendJson(res, ViewJson(v, CardFor(v.id), IsAdmin(req)).dump());
    }
  }

  void ModelAction(const httplib::Request& req, const std::string& id, bool load,
                   httplib::Response& res) {
    const Status st = load ? pool->Load(id) : pool->Unload(id);
    if (!st.ok()) return SendRouterError(req, res, ApiErrorOf(st));
    SendModel(req, res, id);
  }

  void ListModels(const httplib::Request& req, httplib::Response& res) const {
    const bool admin = IsAdmin(req);
    json data = json::array();
    for (const ModelView& v : pool->List()) data.push_back(ViewJson(v, CardFor(v.id), admin));
    server::SendJson(res, json{{"object", "list"}, {"data", data}}.dump());
  }

  // The router's lines, then each loaded model's page, fetched with the caller's key.
  void Metrics(const httplib::Request& req, httplib::Response& res) const {
    httplib::Headers identity;
    for (const char* name : {"Authorization", "x-api-key"}) {
      if (req.has_header(name)) identity.emplace(name, req.get_header_value(name));
    }
    MetricFamilies families;
    families.Add(RouterMetrics(*pool));
    for (const ModelView& v : pool->List()) {
      if (v.state != ModelState::kLoaded) continue;
      families.Add(LabelMetrics(FetchFromModel(v.port, "/metrics", identity), v.id));
    }
    res.set_content(families.Render(), "text/plain; version=0.0.4");
  }

  // The web page: / names its model (a redirect to the only loaded one, or the first), and
  // its files come from this binary; neither loads a model.
  void Page(const httplib::Request& req, httplib::Response& res) const {
    if (req.path == "/" && ModelOfQuery(req).empty()) {
      std::string id = OnlyLoaded();
      if (id.empty()) id = pool->List().front().id;
      res.set_redirect("/?model=" + httplib::encode_query_component(id));
      return;
    }
    const server::WebAsset* a = server::FindWebAsset(req.path);
    if (a == nullptr) {
      return SendRouterError(req, res, {ErrorKind::kNotFound, "no such file", "", ""});
    }
    res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
    res.set_header("Cache-Control", "no-cache");
    for (const auto& [name, value] : server::PageHeaders()) res.set_header(name, value);
  }

  void Routes() {
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      server::SendJson(res, R"({"status":"ok"})");
    });
    for (const char* path : {"/v1/models", "/models"}) {
      http.Get(path, [this](const httplib::Request& req, httplib::Response& res) {
        ListModels(req, res);
      });
    }
    http.Get(R"(/v1/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      SendModel(req, res, req.matches[1].str());
    });
    auto page = [this](const httplib::Request& req, httplib::Response& res) { Page(req, res); };
    http.Get("/", page);
    http.Get("/assets/[^/]+", page);
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      Metrics(req, res);
    });
    http.Post(R"(/v1/models/([^/]+)/(load|unload))",
              [this](const httplib::Request& req, httplib::Response& res) {
                ModelAction(req, req.matches[1].str(), req.matches[2].str() == "load", res);
              });
    http.Post(R"(/models/(load|unload))", [this](const httplib::Request& req,
                                                 httplib::Response& res) {
      const json body = server::api_json::DepthWithin(req.body, 8)
                            ? json::parse(req.body, nullptr, false)
                            : json();
      if (!body.is_object() || !body.contains("model") || !body["model"].is_string()) {
        SendRouterError(req, res, ApiError::Invalid("the body is {\"model\": \"ID\"}", "model"));
        return;
      }
      ModelAction(req, body["model"].get<std::string>(), req.matches[1].str() == "load", res);
    });
    auto forward = [this](const httplib::Request& req, httplib::Response& res) {
      ForwardRoute(req, res);
    };
    http.Get(".*", forward);
    http.Post(".*", forward);
    http.Delete(".*", forward);
  }

  void SetUp() {
    http.UseThreads(options.n_http_threads);
    http.set_payload_max_length(options.max_body_bytes);
    http.set_read_timeout(60);
    http.set_write_timeout(60);
    http.set_keep_alive_timeout(5);
    http.set_tcp_nodelay(true);
    http.set_exception_handler(
        [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
          SendRouterError(req, res, {ErrorKind::kInternal, "internal error", "", ""});
        });
    // The router's own refusals get a line (a forwarded request's line is its model server's).
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      if (res.status < 400 || res.has_header("X-Prefixd-Model")) return;
      server::WriteLogLine(server::LogLine("request")
                               .Add("method", req.method)
                               .Add("path", req.path)
                               .Add("status", (long long)res.status));
    });
    http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.has_header("X-Prefixd-Server")) res.set_header("X-Prefixd-Server", options.server_name);
    });
    Routes();
  }
};

ModelRouter::ModelRouter(ModelPool* pool, const server::TenantAuth* auth, RouterOptions options)
    : impl_(std::make_unique<Impl>(pool, auth, std::move(options))) {
  impl_->SetUp();
}

ModelRouter::~ModelRouter() {
  Stop();
  if (impl_->ticker.joinable()) impl_->ticker.join();
}

Result<int> ModelRouter::Bind() {
  int port = impl_->options.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(impl_->options.host);
    if (port <= 0) return Status::IOError("cannot bind " + impl_->options.host);
  } else if (!impl_->http.bind_to_port(impl_->options.host, port)) {
    return Status::IOError("cannot bind " + impl_->options.host + ":" + std::to_string(port));
  }
  if (impl_->options.server_name.empty()) {
    impl_->options.server_name = HostName() + ":" + std::to_string(port);
  }
  return port;
}

Status ModelRouter::Serve() {
  impl_->ticker = std::thread([this] {
    while (!impl_->stopping) {
      for (int i = 0; i < 10 && !impl_->stopping; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      impl_->pool->Tick();
    }
  });
  if (!impl_->http.listen_after_bind()) {
    if (!impl_->stopping) return Status::IOError("the router's listener failed");
  }
  return Status::OK();
}

void ModelRouter::Stop() {
  impl_->stopping = true;
  impl_->http.stop();
  // Streams in flight end as their model servers stop (cancelling generation at the next
  // token, as `serve -m` does on SIGTERM), so the connection threads can finish.
  impl_->pool->StopAll();
}

}  // namespace prefixd::router
