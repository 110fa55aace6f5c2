#include "cli/serve_models.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "router/model_pool.h"
#include "router/model_process.h"
#include "router/models_config.h"
#include "router/router.h"
#include "server/auth.h"
#include "server/request_log.h"
#include "util/env.h"
#include "util/flags.h"

namespace prefixd::cli {

namespace {

// Router flags that take a value, and the router's switches (none today).
const char* const kRouterValueFlags[] = {"--models-dir",  "--models",      "--models-max",
                                         "--models-memory", "--models-ttl", "--models-wait",
                                         "--models-keep-alive-max",
                                         "--host",        "--port",        "--cache-dir",
                                         "--alias",       "--server-name",
                                         "--max-connections-per-address"};

int Fail(const Status& st) {
  std::fprintf(stderr, "prefixd serve: %s\n", st.ToString().c_str());
  return st.code() == Status::Code::kInvalidArgument ? 2 : 1;
}

Result<std::vector<router::ModelSpec>> LoadSpecs(const RouterArgs& r) {
  std::vector<router::ModelSpec> dir_specs, file_specs;
  if (!r.models_dir.empty()) {
    PREFIXD_ASSIGN_OR_RETURN(dir_specs, router::ScanModelsDir(r.models_dir));
  }
  if (!r.models_file.empty()) {
    std::ifstream in(r.models_file);
    if (!in) return Status::IOError("--models " + r.models_file + ": cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    const size_t slash = r.models_file.find_last_of('/');
    const std::string base = slash == std::string::npos ? "." : r.models_file.substr(0, slash);
    PREFIXD_ASSIGN_OR_RETURN(file_specs,
                             router::ParseModelsFile(text.str(), r.models_file, base));
  }
  return router::MergeSpecs(std::move(dir_specs), std::move(file_specs));
}

Result<router::PoolOptions> PoolOptionsOf(const RouterArgs& r) {
  if (r.models_max < 0 || r.models_max > 1024) {
    return Status::InvalidArgument("--models-max: 0 (no limit) or 1..1024");
  }
  if (r.models_keep_alive_max_s < 0 || r.models_keep_alive_max_s > 366 * 86400) {
    return Status::InvalidArgument("--models-keep-alive-max: 0 (tenants' keep_alive ignored) "
                                   "or seconds, at most 366 days");
  }
  if (r.models_ttl_s < 0 || r.models_wait_s < 1) {
    return Status::InvalidArgument("--models-ttl: 0 (never) or seconds; --models-wait: >= 1 s");
  }
  router::PoolOptions o;
  o.max_loaded = size_t(r.models_max);
  PREFIXD_ASSIGN_OR_RETURN(o.memory_budget, ParseByteSize("--models-memory", r.models_memory));
  o.default_ttl_s = int(r.models_ttl_s);
  o.wait_limit = std::chrono::seconds(r.models_wait_s);
  return o;
}

// Each model's card (model_card.h), and a start-log line per model saying whether it reads
// images and its window, as /v1/models will.
std::map<std::string, router::ModelCard> CardsOf(const std::vector<router::ModelSpec>& specs,
                                                 const router::CardDefaults& defaults) {
  std::map<std::string, router::ModelCard> cards;
  for (const router::ModelSpec& spec : specs) {
    const router::ModelCard card = router::CardOf(spec, defaults, router::TrainedContextOf);
    server::LogLine line("model");
    line.Add("id", spec.id)
        .Add("input", card.reads_images ? "text,image" : "text")
        .Add("ctx", (long long)card.n_ctx)
        .Add("ctx_from", router::ContextSourceName(card.n_ctx_from));
    if (card.reads_images) line.Add("mmproj", spec.mmproj);
    server::WriteLogLine(line);
    cards.emplace(spec.id, card);
  }
  return cards;
}

}  // namespace

bool WantsRouter(const RouterArgs& r) { return !r.models_dir.empty() || !r.models_file.empty(); }

std::vector<std::string> ChildCommonArgs(int argc, char** argv, int first) {
  std::vector<std::string> out;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    bool skip = false;
    for (const char* flag : kRouterValueFlags) {
      const std::string f = flag;
      if (arg == f) {
        skip = true;
        ++i;  // its value
        break;
      }
      if (arg.rfind(f + "=", 0) == 0) {
        skip = true;
        break;
      }
    }
    if (!skip) out.push_back(arg);
  }
  // Every connection to a model's server comes from the router: the router caps per client.
  out.insert(out.end(), {"--max-connections-per-address", "0"});
  return out;
}

int ServeRouter(const RouterServeArgs& a) {
  auto specs = LoadSpecs(a.router);
  if (!specs.ok()) return Fail(specs.status());
  auto pool_options = PoolOptionsOf(a.router);
  if (!pool_options.ok()) return Fail(pool_options.status());
  auto auth = server::TenantAuth::Create(
      Env::Default(), server::AuthOptions{a.api_key_file, a.admin_key_file, a.cache_dir});
  if (!auth.ok()) return Fail(auth.status());

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::map<std::string, router::ModelCard> cards = CardsOf(*specs, a.card_defaults);
  router::ChildLauncherOptions lo;
  lo.common_args = a.child_args;
  lo.cache_root = a.cache_dir;
  std::unique_ptr<router::ModelLauncher> launcher = router::NewChildLauncher(lo);
  const size_t n_models = specs->size();
  router::ModelPool pool(std::move(*specs), launcher.get(), *pool_options);
  router::RouterOptions ro;
  ro.host = a.host;
  ro.port = a.port;
  ro.server_name = a.server_name;
  ro.max_body_bytes = a.max_body_bytes;
  ro.max_connections_per_address = a.max_connections_per_address;
  ro.request_read_timeout_ms = a.request_read_timeout_ms;
  ro.allowed_hosts = a.allowed_hosts;
  ro.cors_origins = a.cors_origins;
  ro.tenant_keep_alive_max = std::chrono::seconds(a.router.models_keep_alive_max_s);
  ro.cards = std::move(cards);
  router::ModelRouter http(&pool, auth->get(), ro);
  auto port = http.Bind();
  if (!port.ok()) return Fail(port.status());
  server::WriteLogLine(server::LogLine("listening")
                           .Add("host", a.host)
                           .Add("port", (long long)*port)
                           .Add("mode", "router")
                           .Add("models", (long long)n_models)
                           .Add("models_max", (long long)pool_options->max_loaded)
                           .Add("models_memory", (long long)pool_options->memory_budget)
                           .Add("cache_dir", a.cache_dir.empty() ? "none" : a.cache_dir)
                           .Add("api_keys", (*auth)->enabled() ? "on" : "off"));
  std::thread starter([&pool] { pool.Start(); });  // pinned models, while serving
  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    signalled = true;
    http.Stop();
  });
  Status st = http.Serve();
  if (!signalled) pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  starter.join();
  server::WriteLogLine(server::LogLine("stopping"));
  return st.ok() ? 0 : Fail(st);  // the pool stops every model's server as it goes
}

}  // namespace prefixd::cli
