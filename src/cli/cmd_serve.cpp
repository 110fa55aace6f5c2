// prefixd serve: the OpenAI-compatible HTTP server (server/server.h) over the engine.
//
// Starts the engine (which locks the cache dir), loads the API keys, binds (port 0: any free
// port; the chosen one is logged as `prefixd listening … port=N`), then serves until SIGINT or
// SIGTERM, when it stops accepting, cancels running generations, and flushes the disk tier.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli/commands.h"
#include "cli/serve_models.h"
#include "engine/engine.h"
#include "events/kv_events.h"
#include "engine/engine_flags.h"
#include "server/auth.h"
#include "server/backend.h"
#include "server/request_log.h"
#include "server/server.h"
#include "store/sealing_key.h"
#include "util/flags.h"
#include "util/idle_trimmer.h"
#include "util/process_memory.h"

namespace prefixd::cli {

namespace {

// The defaults are the options structs' (engine::EngineOptions through the engine flags,
// server::ServerOptions), but for the two that serve chooses itself: --slots and --ctx.
const server::ServerOptions kServer;

engine::EngineFlagValues ServeEngineDefaults() {
  engine::EngineFlagValues v;
  v.slots = 2;  // two sessions at once (the engine's default is 1 slot)
  v.ctx = 0;    // the model's trained context (the engine's default: 8192)
  return v;
}

// --kv-events and its companions (docs/kv-events.md); defaults are events::KvEventOptions'.
struct KvEventArgs {
  std::string bind;     // --kv-events ENDPOINT
  std::string connect;  // --kv-events-connect ENDPOINT
  std::string replay;   // --kv-events-replay ENDPOINT
  std::string pod;      // "": the host name
  int64_t block_size = int64_t(events::KvEventOptions{}.block_size);
  std::string format = "array";
  bool tenants = false;
  bool on() const { return !bind.empty() || !connect.empty(); }
};

struct ServeArgs {
  engine::EngineFlagValues engine = ServeEngineDefaults();  // cache_dir "": the default dir
  std::string alias;
  std::string server_name;
  std::string host = kServer.host;
  int64_t port = kServer.port;
  std::string max_body = ByteSizeText(kServer.max_body_bytes);
  int64_t n_predict = server::ServerOptions{}.n_predict;
  int64_t request_read_timeout_s = server::ServerOptions{}.request_read_timeout_ms / 1000;
  int64_t max_connections_per_address = int64_t(server::ServerOptions{}.max_connections_per_address);
  std::string logit_bias;
  bool log_prompts = false;
  std::string images = server::ImageModeName(kServer.images.mode);
  std::string allowed_hosts;
  std::string cors_origins;
  bool encrypt_cache = false;
  std::string cache_key_file;
  std::string api_key_file;
  std::string admin_key_file;
  KvEventArgs kv_events;
  RouterArgs router;
};

std::string DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/prefixd";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.cache/prefixd";
  }
  return "";
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The non-empty items of a comma-separated list.
std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    if (end > begin) out.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// --alias NAME[,NAME...]: the first is the model's id, the others more names for it.
std::vector<std::string> Aliases(const ServeArgs& a) { return SplitList(a.alias); }

// --logit-bias ID(+|-)BIAS[,...], as llama-server spells it: 151645+5,42-100.
Result<std::vector<std::pair<int32_t, float>>> ParseLogitBias(const std::string& spec) {
  std::vector<std::pair<int32_t, float>> out;
  for (const std::string& item : SplitList(spec)) {
    const size_t sign = item.find_first_of("+-", 1);
    char* id_end = nullptr;
    char* bias_end = nullptr;
    const long id = std::strtol(item.c_str(), &id_end, 10);
    const float bias = sign == std::string::npos ? 0.0f : std::strtof(item.c_str() + sign, &bias_end);
    if (sign == std::string::npos || id_end != item.c_str() + sign || id < 0 || id > INT32_MAX ||
        bias_end != item.c_str() + item.size() || !std::isfinite(bias)) {
      return Status::InvalidArgument("--logit-bias: '" + item + "' is not TOKEN_ID+BIAS or "
                                     "TOKEN_ID-BIAS");
    }
    out.emplace_back(int32_t(id), bias);
  }
  return out;
}

// "models/Qwen3-8B-Q4_K_M.gguf" -> "Qwen3-8B-Q4_K_M", unless --alias names it.
std::string ModelId(const ServeArgs& a) {
  const std::vector<std::string> aliases = Aliases(a);
  if (!aliases.empty()) return aliases.front();
  const std::string& model = a.engine.model;
  std::string id = model.substr(model.find_last_of('/') + 1);
  if (id.size() > 5 && id.compare(id.size() - 5, 5, ".gguf") == 0) id.resize(id.size() - 5);
  return id;
}

// The server's own flags (the engine's are checked by engine::ToEngineOptions).
Status CheckRanges(const ServeArgs& a) {
  if (a.port < 0 || a.port > 65535) return Status::InvalidArgument("--port: 0..65535");
  if (a.request_read_timeout_s < 0 || a.request_read_timeout_s > 86400) {
    return Status::InvalidArgument("--request-read-timeout: 0 (none) or 1..86400 seconds");
  }
  if (a.max_connections_per_address < 0 || a.max_connections_per_address > 100000) {
    return Status::InvalidArgument("--max-connections-per-address: 0 (no cap) or 1..100000");
  }
  if (a.n_predict < 0 || a.n_predict > (1 << 24)) {
    return Status::InvalidArgument("--n-predict: 0 (no cap) or 1..16777216");
  }
  if (auto mode = server::ParseImageMode(a.images); !mode.ok()) return mode.status();
  return Status::OK();
}

// --encrypt-cache: the records' key, from a file, the environment or a systemd credential,
// never from the cache dir (store/sealing_key.h says where it is looked for, in which order,
// and what is refused). Every server given the same key material reads the same records.
Result<AeadKey> RecordKey(const ServeArgs& a, const std::string& cache_dir) {
  if (!a.encrypt_cache) {
    return Status::InvalidArgument("--cache-key-file seals nothing without --encrypt-cache");
  }
  PREFIXD_ASSIGN_OR_RETURN(
      store::SealingKey key,
      store::LoadSealingKey(Env::Default(),
                            store::SealingKeySourcesFromEnvironment(a.cache_key_file), cache_dir));
  server::WriteLogLine(server::LogLine("encrypt_cache").Add("key_from", key.source));
  return key.key;
}

Result<engine::EngineOptions> EngineOptionsOf(const ServeArgs& a) {
  PREFIXD_RETURN_IF_ERROR(CheckRanges(a));
  engine::EngineFlagValues values = a.engine;
  if (values.cache_dir.empty()) values.cache_dir = DefaultCacheDir();
  PREFIXD_ASSIGN_OR_RETURN(engine::EngineOptions eo, engine::ToEngineOptions(values));
  if (a.encrypt_cache || !a.cache_key_file.empty()) {
    PREFIXD_ASSIGN_OR_RETURN(eo.record_key, RecordKey(a, eo.cache_dir));
  }
  return eo;
}

Result<server::ServerOptions> ServerOptionsOf(const ServeArgs& a) {
  server::ServerOptions so;
  so.host = a.host;
  so.port = int(a.port);
  PREFIXD_ASSIGN_OR_RETURN(uint64_t max_body, ParseByteSize("--max-body", a.max_body));
  so.max_body_bytes = size_t(max_body);
  so.model_id = ModelId(a);
  if (server::IsModelPattern(so.model_id)) {
    return Status::InvalidArgument("--alias: the first name is the model's id, not a pattern ('" +
                                   so.model_id + "'); put a plain name first, e.g. local,claude-*");
  }
  so.server_name = a.server_name;
  const std::vector<std::string> aliases = Aliases(a);
  if (aliases.size() > 1) so.aliases.assign(aliases.begin() + 1, aliases.end());
  PREFIXD_ASSIGN_OR_RETURN(so.logit_bias, ParseLogitBias(a.logit_bias));
  // Every slot and every queued request holds a connection thread; a few more keep /health
  // and /metrics answering when all of them are busy.
  so.n_http_threads = size_t(a.engine.slots + a.engine.max_queue + 8);
  // Generation requests beyond the slots and the queue get 503 before they are parsed.
  so.max_admitted = size_t(a.engine.slots + a.engine.max_queue);
  so.n_predict = int(a.n_predict);
  so.log_prompts = a.log_prompts;
  PREFIXD_ASSIGN_OR_RETURN(so.images.mode, server::ParseImageMode(a.images));
  if (!a.engine.mmproj.empty()) so.images.mode = server::ImageMode::kRead;
  so.request_read_timeout_ms = int(a.request_read_timeout_s * 1000);
  so.max_connections_per_address = size_t(a.max_connections_per_address);
  so.allowed_hosts = SplitList(a.allowed_hosts);
  so.cors_origins = SplitList(a.cors_origins);
  return so;
}

int Fail(const Status& st) {
  std::fprintf(stderr, "prefixd serve: %s\n", st.ToString().c_str());
  return st.code() == Status::Code::kInvalidArgument ? 2 : 1;
}

// Blocks SIGINT/SIGTERM in every thread started after this; a dedicated thread waits for them.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

// A restore from disk keeps its prefix's record files open from the request's arrival to its
// restore (one per 256-token Block: ~500 for a 128K-token prompt, per queued request), and every
// client holds a socket: the soft descriptor limit (often 1024) goes up to the hard one, as
// servers do. Opening past the limit is no error either way: that restore reads through RAM.
void RaiseDescriptorLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

// glibc malloc arenas for a server (docs/http-api.md, "Memory over weeks"); MALLOC_ARENA_MAX
// in the environment wins.
constexpr int kServeMallocArenas = 2;

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "localhost";
  return name;
}

// The KV-event publisher --kv-events asks for; null without it.
Result<std::unique_ptr<events::KvEventPublisher>> StartKvEvents(const ServeArgs& a,
                                                                const engine::EngineOptions& eo,
                                                                const std::string& model_id) {
  const KvEventArgs& k = a.kv_events;
  if (!k.on()) {
    if (!k.replay.empty()) return Status::InvalidArgument("--kv-events-replay: with --kv-events");
    return std::unique_ptr<events::KvEventPublisher>();
  }
  if (!k.bind.empty() && !k.connect.empty()) {
    return Status::InvalidArgument("--kv-events binds, --kv-events-connect connects: one of them");
  }
  events::KvEventOptions o;
  o.connect = k.bind.empty();
  o.endpoint = o.connect ? k.connect : k.bind;
  o.pod = k.pod.empty() ? HostName() : k.pod;
  o.model = model_id;
  if (k.block_size <= 0) return Status::InvalidArgument("--kv-events-block-size: 1 or more");
  o.block_size = size_t(k.block_size);
  o.cache_block_size = eo.block_size;
  o.replay.endpoint = k.replay;
  if (k.format == "map") {
    o.encoding = events::KvEventEncoding::kMap;
  } else if (k.format != "array") {
    return Status::InvalidArgument("--kv-events-format: array or map");
  }
  return events::KvEventPublisher::Start(std::move(o));
}

int Serve(const ServeArgs& a) {
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) SetUpAllocator(kServeMallocArenas);
  auto eo = EngineOptionsOf(a);
  if (!eo.ok()) return Fail(eo.status());
  RaiseDescriptorLimit();
  auto so = ServerOptionsOf(a);
  if (!so.ok()) return Fail(so.status());
  // Before any thread starts (the publisher's, ZMQ's): a thread that does not block them would
  // take SIGTERM's default action and end the process without its clean stop.
  sigset_t stop_signals = BlockStopSignals();
  auto kv_events = StartKvEvents(a, *eo, so->model_id);
  if (!kv_events.ok()) return Fail(kv_events.status());
  eo->block_listener = kv_events->get();
  eo->block_events_all_tenants = a.kv_events.tenants;
  if (events::KvEventPublisher* p = kv_events->get()) {
    so->kv_event_totals = [p] {
      const events::KvEventCounts c = p->counts();
      return server::KvEventTotals{c.published, c.dropped};
    };
  }
  auto engine = engine::Engine::Create(*eo);
  if (!engine.ok()) return Fail(engine.status());
  auto auth = server::TenantAuth::Create(
      Env::Default(), server::AuthOptions{a.api_key_file, a.admin_key_file, eo->cache_dir});
  if (!auth.ok()) return Fail(auth.status());
  engine::Engine* engine_ptr = engine->get();
  std::unique_ptr<server::Backend> backend = server::NewEngineBackend(std::move(*engine));
  for (const auto& [token, bias] : so->logit_bias) {
    if (token >= backend->n_vocab()) {
      return Fail(Status::InvalidArgument("--logit-bias: token " + std::to_string(token) +
                                          " is not below the vocabulary size " +
                                          std::to_string(backend->n_vocab())));
    }
  }
  server::HttpServer http(backend.get(), auth->get(), *so);
  auto port = http.Bind();
  if (!port.ok()) return Fail(port.status());
  const engine::EngineStats placement = engine_ptr->GetStats();
  server::WriteLogLine(server::LogLine("listening")
                           .Add("host", a.host)
                           .Add("port", (long long)*port)
                           .Add("model", http.model_id())
                           .Add("slots", (long long)eo->n_slots)
                           .Add("ctx", (long long)engine_ptr->n_ctx_per_slot())
                           .Add("devices", placement.devices)
                           .Add("kv", placement.cache_type_k + "/" + placement.cache_type_v)
                           .Add("cache_dir", eo->cache_dir.empty() ? "none" : eo->cache_dir)
                           .Add("remote_cache", eo->remote_cache_url.empty() ? "none"
                                                                             : eo->remote_cache_url)
                           .Add("api_keys", (*auth)->enabled() ? "on" : "off")
                           .Add("admin_keys", (*auth)->has_admin_keys() ? "on" : "off"));
  if (!IsLoopback(a.host) && !(*auth)->enabled()) {
    server::WriteLogLine(server::LogLine("warning").Add(
        "message", "listening on " + a.host + " without API keys: anyone who can reach it "
                   "may use it and read its cache; give --api-key-file, or --host 127.0.0.1"));
  }
  // Gone idle after requests: the allocator's free memory goes back to the kernel.
  IdleTrimmer trimmer({.activity = [&] { return engine_ptr->GetStats().requests; },
                       .busy = [&] {
                         const engine::EngineStats s = engine_ptr->GetStats();
                         return s.slots_busy > 0 || s.queue_depth > 0;
                       },
                       .trim = {}});
  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    signalled = true;
    http.Stop();
  });
  Status st = http.Serve();
  if (!signalled) pthread_kill(waiter.native_handle(), SIGTERM);  // Serve() failed: wake it
  waiter.join();
  server::WriteLogLine(server::LogLine("stopping"));
  engine_ptr->FlushCache();
  if (*kv_events) {
    const events::KvEventCounts c = (*kv_events)->counts();
    server::WriteLogLine(server::LogLine("kv_events")
                             .Add("published", (long long)c.published)
                             .Add("dropped", (long long)c.dropped));
  }
  return st.ok() ? 0 : Fail(st);
}

// Router mode: the router takes its address, keys and limits; the rest of the command line
// goes to every model's server.
int ServeModels(const ServeArgs& a, int argc, char** argv) {
  if (!a.engine.model.empty()) {
    return Fail(Status::InvalidArgument("-m serves one model; --models-dir/--models serve "
                                        "several: give one or the other"));
  }
  if (!a.engine.mmproj.empty()) {
    return Fail(Status::InvalidArgument(
        "--mmproj is one model's projector: in router mode put it in the model's folder in "
        "--models-dir (a file with \"mmproj\" in its name beside the model's), or give it as "
        "mmproj = FILE in the model's section of the --models file"));
  }
  if (Status st = CheckRanges(a); !st.ok()) return Fail(st);
  RouterServeArgs r;
  r.router = a.router;
  r.host = a.host;
  r.port = int(a.port);
  r.server_name = a.server_name;
  r.cache_dir = a.engine.cache_dir.empty() ? DefaultCacheDir() : a.engine.cache_dir;
  // Each model's server loads the key itself, inside its own dir under the root: checked here
  // against the whole root, and before any model starts.
  if (a.encrypt_cache || !a.cache_key_file.empty()) {
    if (auto key = RecordKey(a, r.cache_dir == "none" ? "" : r.cache_dir); !key.ok()) {
      return Fail(key.status());
    }
  }
  r.api_key_file = a.api_key_file;
  r.admin_key_file = a.admin_key_file;
  auto max_body = ParseByteSize("--max-body", a.max_body);
  if (!max_body.ok()) return Fail(max_body.status());
  r.max_body_bytes = size_t(*max_body);
  r.max_connections_per_address = size_t(a.max_connections_per_address);
  r.request_read_timeout_ms = int(a.request_read_timeout_s * 1000);
  r.allowed_hosts = SplitList(a.allowed_hosts);
  r.cors_origins = SplitList(a.cors_origins);
  r.child_args = ChildCommonArgs(argc, argv, 2);
  r.card_defaults = {a.engine.ctx, a.n_predict};
  RaiseDescriptorLimit();
  return ServeRouter(r);
}

// --logit-bias, --n-predict, --images and the HTTP limits.
void DeclareRequestFlags(Flags& flags, ServeArgs& a) {
  flags.String("-l,--logit-bias", &a.logit_bias,
               "TOKEN_ID(+|-)BIAS[,...]: added to every request's logits for these tokens, "
               "under the request's own logit_bias");
  flags.Int("-n,--n-predict", &a.n_predict,
            "the most tokens one request generates: a larger max_tokens (or none) is lowered "
            "to it; 0: no cap but the context");
  flags.String("--max-body", &a.max_body, "largest request body accepted (e.g. 32M)");
  flags.Int("--request-read-timeout", &a.request_read_timeout_s,
            "seconds a request's headers and body may take to arrive from its first byte, "
            "however they trickle; 0: none but 60 s per read");
  flags.Int("--max-connections-per-address", &a.max_connections_per_address,
            "connections one client address may have open; more get 429 at once; 0: no cap");
  flags.String("--images", &a.images,
               "what an image in a request becomes for a model that reads none: stand-in (a "
               "short text in the prompt saying what it was; the response's X-Prefixd-Images "
               "header says so, and the session goes on) or refuse (a 400 image_not_supported)");
}

// --encrypt-cache and who may see what: hosts, origins, prompts in the log.
void DeclareExposureFlags(Flags& flags, ServeArgs& a) {
  flags.Bool("--encrypt-cache", &a.encrypt_cache,
             "seal every disk and shared-tier record (AES-256-GCM) under a key kept outside the "
             "cache dir (--cache-key-file, PREFIXD_CACHE_KEY_FILE, PREFIXD_CACHE_KEY or the "
             "systemd credential prefixd-cache-key): a copied cache dir or Redis shows no token "
             "without it, and records that do not verify are never used");
  flags.String("--cache-key-file", &a.cache_key_file,
               "FILE: the --encrypt-cache key, 32+ random bytes or 64+ hex digits, mode 0600, "
               "outside the cache dir (head -c 32 /dev/urandom > FILE); every server sharing "
               "records needs the same one");
  flags.String("--allowed-host", &a.allowed_hosts,
               "NAME[,NAME...]: host names requests may use besides IP addresses and "
               "localhost (a page that re-resolves its own name to this machine is refused)");
  flags.String("--cors-origin", &a.cors_origins,
               "ORIGIN[,ORIGIN...] (e.g. http://localhost:3000): pages of these origins may call "
               "the API from a browser (CORS); none by default");
  flags.Bool("--log-prompts", &a.log_prompts,
             "put the prompt text around a cache miss's divergence point into the log lines "
             "and /v1/requests/recent (off: the position only; it is every tenant's text)");
}

// --kv-events: the slots', RAM and disk tiers' Blocks as llm-d's KV-event stream
// (events/kv_events.h).
void DeclareKvEventFlags(Flags& flags, KvEventArgs& k) {
  flags.String("--kv-events", &k.bind,
               "ENDPOINT (e.g. tcp://*:5557): publish the cache's Blocks as KV events in "
               "vLLM's format on a ZMQ PUB socket bound here, for llm-d's or Dynamo's indexer "
               "(docs/kv-events.md)");
  flags.String("--kv-events-connect", &k.connect,
               "ENDPOINT: as --kv-events, the PUB socket connecting to an indexer's address");
  flags.String("--kv-events-replay", &k.replay,
               "ENDPOINT (e.g. tcp://*:5558): bind vLLM's replay socket (ZMQ ROUTER) there: a "
               "subscriber that saw a gap asks for the last messages from a sequence on "
               "(docs/kv-events.md, \"Replay\")");
  flags.String("--kv-events-pod", &k.pod,
               "the pod name in the topic kv@POD@MODEL (default: the host name)");
  flags.Int("--kv-events-block-size", &k.block_size,
            "tokens per published block; divides --block-size (llm-d hashes 16)");
  flags.String("--kv-events-format", &k.format,
               "array (vLLM's tagged arrays) or map (a \"type\" key, vLLM's field names)");
  flags.Bool("--kv-events-tenants", &k.tenants,
             "publish the token ids of tenant-salted prompts too (off: only prompts without "
             "an API key's tenant; the stream shows token ids to whoever subscribes)");
}

// --models-dir and --models: several models behind one port (serve_models.h).
void DeclareRouterFlags(Flags& flags, RouterArgs& r) {
  flags.String("--models-dir", &r.models_dir,
               "serve every model in DIR (instead of -m): each .gguf in it, and each folder "
               "in it holding a model's .gguf (with its projector, a file with \"mmproj\" in "
               "its name, beside it: that model reads images); a request's \"model\" picks "
               "one, which is loaded on first use in a server process of its own");
  flags.String("--models", &r.models_file,
               "a models file (INI, one [id] section a model: model, mmproj, alias, pinned, "
               "ttl, and any serve flag for that model); with --models-dir, its sections "
               "override");
  flags.Int("--models-max", &r.models_max,
            "models loaded at once; loading one more unloads the least recently used idle "
            "unpinned model; 0: no limit");
  flags.String("--models-memory", &r.models_memory,
               "memory the loaded models' servers may hold (resident, measured; e.g. 24G); "
               "0: no limit");
  flags.Int("--models-ttl", &r.models_ttl_s,
            "seconds an idle model stays loaded (a models file's ttl overrides); 0: forever");
  flags.Int("--models-wait", &r.models_wait_s,
            "seconds a request waits for its model to load or for room, before a 503");
  flags.Int("--models-keep-alive-max", &r.models_keep_alive_max_s,
            "seconds the longest a tenant's keep_alive/ttl may keep a model loaded past its "
            "ttl (with API keys; admins' are theirs); 0: tenants' keep_alive is ignored");
}

// Every flag of serve, in the order --help lists them: the engine's between the server's.
void DeclareServeFlags(Flags& flags, ServeArgs& a) {
  using engine::EngineFlagSet;
  engine::DeclareEngineFlags(flags, a.engine, EngineFlagSet::kModel);
  DeclareRouterFlags(flags, a.router);
  flags.String("--alias", &a.alias,
               "model id clients use (default: the file name without .gguf); NAME,NAME,...: the "
               "first is the id, every other one is accepted for the same model too; a name with "
               "* ? [ is a pattern (local,claude-*,gpt-*: every name the agents ask for)");
  flags.String("--host", &a.host, "address to listen on (127.0.0.1: this machine only)");
  flags.String("--server-name", &a.server_name,
               "this server's name in every response's X-Prefixd-Server header (a fleet's load "
               "balancer and logs tell servers apart by it; default: HOSTNAME:PORT)");
  flags.Int("--port", &a.port, "TCP port; 0 picks a free one (logged at start)");
  engine::DeclareEngineFlags(
      flags, a.engine,
      EngineFlagSet::kCacheDir | EngineFlagSet::kCacheSizes | EngineFlagSet::kBlockSize |
          EngineFlagSet::kSlots | EngineFlagSet::kContext | EngineFlagSet::kThreads |
          EngineFlagSet::kBatch | EngineFlagSet::kGpuLayers | EngineFlagSet::kMaxQueue);
  DeclareRequestFlags(flags, a);
  engine::DeclareEngineFlags(flags, a.engine, EngineFlagSet::kNoCache);
  DeclareExposureFlags(flags, a);
  DeclareKvEventFlags(flags, a.kv_events);
  engine::DeclareEngineFlags(flags, a.engine,
                             EngineFlagSet::kWholeState | EngineFlagSet::kFlashAttn |
                                 EngineFlagSet::kChatTemplate | EngineFlagSet::kRemoteCache |
                                 EngineFlagSet::kSpeculation | EngineFlagSet::kProjector);
  flags.String("--api-key-file", &a.api_key_file,
               "file with one API key per line; requests must send one (default: no keys)");
  flags.String("--admin-key-file", &a.admin_key_file,
               "file with one admin key per line: only these keys may call the admin routes "
               "(POST /v1/cache/clear); they are tenants too. With API keys and no admin file "
               "the admin routes are off");
}

}  // namespace

int CmdServe(int argc, char** argv) {
  ServeArgs a;
  Flags flags("serve", "Serve a GGUF model over an OpenAI-compatible HTTP API.");
  DeclareServeFlags(flags, a);
  return RunWithFlags(flags, argc, argv, [&] {
    if (WantsRouter(a.router)) {
      if (a.kv_events.on()) {
        return Fail(Status::InvalidArgument("--kv-events serves one model (-m), not --models"));
      }
      return ServeModels(a, argc, argv);
    }
    if (a.engine.model.empty()) {
      std::fprintf(stderr, "prefixd serve: -m/--model is required\n\n%s", flags.Help().c_str());
      return 2;
    }
    return Serve(a);
  });
}

}  // namespace prefixd::cli
