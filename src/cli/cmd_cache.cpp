// `prefixd cache ls|stats|verify|gc|clear --cache-dir D [filters]` (stats also, or only, with
// --remote-cache URL: the shared tier): inspect and manage a disk
// cache directory through store::DiskStore. The store locks the directory, so these commands
// refuse to run while a server has it open ("cache dir D is in use by pid N").
#include <cctype>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "cli/commands.h"
#include "cache/domain_registry.h"
#include "cache/fingerprint.h"
#include "engine/engine_flags.h"
#include "store/disk_store.h"
#include "store/redis_store.h"
#include "util/flags.h"

namespace prefixd::cli {

namespace {

using engine::RemoteCacheFlags;
using store::DiskStore;
using store::RecordMeta;

constexpr const char* kActions = "ls|stats|verify|gc|clear";

struct CacheFlags {
  std::string cache_dir;
  std::string model;
  std::string domain;       // hex prefix of the domain root
  std::string keep_domain;  // gc: drop every domain that does not match this prefix
  int64_t max_age_days = 0; // gc: drop records not used for this many days
  bool all = false;         // clear: everything
  bool missing_models = false;  // gc: drop domains whose model file is gone or changed
  RemoteCacheFlags remote;      // stats: the shared tier too
};

// Which records a command applies to: a domain hex prefix, or (from --model) a set of
// domains. An empty filter matches everything.
struct DomainFilter {
  std::string hex_prefix;
  std::optional<std::set<Digest>> domains;
  bool empty() const { return hex_prefix.empty() && !domains; }
  bool Matches(const RecordMeta& m) const {
    if (domains) return domains->count(m.domain) != 0;
    return DigestHex(m.domain).compare(0, hex_prefix.size(), hex_prefix) == 0;
  }
};

// The domains made with the model file F, from the descriptors the server writes under
// <cache dir>/domains (cache/domain_registry.h): matched by the file's content fingerprint.
Result<DomainFilter> DomainFilterForModel(const std::string& cache_dir,
                                          const std::string& model_path) {
  cache::FingerprintMemo memo(cache_dir + "/fingerprints.tsv");
  Result<Digest> fp = cache::FileFingerprint(model_path, memo);
  if (!fp.ok()) return fp.status().WithContext("--model " + model_path);
  DomainFilter filter;
  filter.domains.emplace();
  for (const cache::DomainInfo& d : cache::ListDomains(cache_dir)) {
    if (d.model_fingerprint == *fp) filter.domains->insert(d.domain);
  }
  return filter;
}

// Domains whose model file is gone or changed since they were made (gc --missing-models).
std::set<Digest> DomainsOfMissingModels(const std::string& cache_dir) {
  std::set<Digest> out;
  cache::FingerprintMemo memo(cache_dir + "/fingerprints.tsv");
  for (const cache::DomainInfo& d : cache::ListDomains(cache_dir)) {
    Result<Digest> fp = cache::FileFingerprint(d.model_path, memo);
    if (!fp.ok() || *fp != d.model_fingerprint) out.insert(d.domain);
  }
  return out;
}

Result<DomainFilter> MakeFilter(const CacheFlags& f) {
  if (!f.model.empty()) return DomainFilterForModel(f.cache_dir, f.model);
  for (char c : f.domain) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("--domain: expected a lower-case hex prefix, got '" +
                                     f.domain + "'");
    }
  }
  return DomainFilter{f.domain};
}

std::string FormatTime(uint64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Prints the error; exit code 2 for bad usage, 1 for a run-time failure.
int Fail(const Status& st) {
  std::fprintf(stderr, "prefixd cache: %s\n", st.ToString().c_str());
  return st.code() == Status::Code::kInvalidArgument ? 2 : 1;
}

int CmdLs(DiskStore& store, const DomainFilter& filter) {
  std::printf("%-16s %-16s %-4s %10s %7s %12s  %s\n", "domain", "key", "kind", "position",
              "tokens", "payload", "last access");
  for (const RecordMeta& m : store.List()) {
    if (!filter.Matches(m)) continue;
    std::printf("%-16s %-16s %-4s %10u %7zu %12llu  %s\n", DigestHex(m.domain, 8).c_str(),
                DigestHex(m.key, 8).c_str(), store::RecordKindName(m.kind), m.position,
                m.tokens.size(), static_cast<unsigned long long>(m.payload_bytes),
                FormatTime(m.last_access_unix_ms).c_str());
  }
  return 0;
}

int CmdStats(DiskStore& store, const DomainFilter& filter) {
  struct Sum {
    uint64_t records = 0, bytes = 0;
  };
  std::map<std::string, Sum> by_domain;
  for (const RecordMeta& m : store.List()) {
    if (!filter.Matches(m)) continue;
    Sum& s = by_domain[DigestHex(m.domain, 8)];
    ++s.records;
    s.bytes += store::RecordFileBytes(m);
  }
  store::Stats st = store.GetStats();
  std::printf("records: %llu\nbytes:   %llu\nindex:   %llu (index.log; with the records, what "
              "--disk-quota bounds)\nopen:    %s\n",
              static_cast<unsigned long long>(st.records),
              static_cast<unsigned long long>(st.bytes),
              static_cast<unsigned long long>(st.index_bytes), st.recovery.ToString().c_str());
  for (const std::string& d : st.recovery.dropped) std::printf("  dropped %s\n", d.c_str());
  std::printf("domains:\n");
  for (const auto& [domain, s] : by_domain) {
    std::printf("  %s  %8llu records  %14llu bytes\n", domain.c_str(),
                static_cast<unsigned long long>(s.records),
                static_cast<unsigned long long>(s.bytes));
  }
  return 0;
}

int CmdVerify(DiskStore& store) {
  store::VerifyReport r = store.Verify();
  for (const std::string& p : r.problems) std::printf("bad: %s (removed)\n", p.c_str());
  std::printf("checked %llu records, %llu bad; at open: %s\n",
              static_cast<unsigned long long>(r.checked), static_cast<unsigned long long>(r.bad),
              store.GetStats().recovery.ToString().c_str());
  return r.bad == 0 ? 0 : 1;
}

// Removes every listed record for which `drop` is true; prints and returns the count.
template <typename Pred>
int RemoveWhere(DiskStore& store, Pred drop) {
  uint64_t n = 0, bytes = 0;
  for (const RecordMeta& m : store.List()) {
    if (!drop(m) || !store.Remove(m.key, m.kind).ok()) continue;
    ++n;
    bytes += store::RecordFileBytes(m);
  }
  std::printf("removed %llu records (%llu bytes)\n", static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(bytes));
  return 0;
}

int CmdGc(DiskStore& store, const CacheFlags& f, const DomainFilter& filter, uint64_t now_ms) {
  bool by_domain = !filter.empty();
  DomainFilter keep{f.keep_domain, std::nullopt};
  uint64_t max_age_ms = static_cast<uint64_t>(f.max_age_days) * 86400ull * 1000ull;
  std::set<Digest> orphans;
  if (f.missing_models) orphans = DomainsOfMissingModels(f.cache_dir);
  return RemoveWhere(store, [&](const RecordMeta& m) {
    if (by_domain && filter.Matches(m)) return true;
    if (orphans.count(m.domain)) return true;
    if (!f.keep_domain.empty() && !keep.Matches(m)) return true;
    return max_age_ms > 0 && m.last_access_unix_ms + max_age_ms < now_ms;
  });
}

int CmdClear(DiskStore& store, const DomainFilter& filter) {
  return RemoveWhere(store, [&](const RecordMeta& m) { return filter.Matches(m); });
}

// The shared tier as Redis reports it (with --remote-cache).
int CmdRemoteStats(const RemoteCacheFlags& remote) {
  Result<std::string> password = remote.Password();
  if (!password.ok()) return Fail(password.status());
  store::RedisStoreOptions o;
  o.url = remote.url;
  o.password = *password;
  o.read_connections = 1;
  Result<std::unique_ptr<store::RedisStore>> rs = store::RedisStore::Open(o);
  if (!rs.ok()) return Fail(rs.status());
  Result<store::RedisServerInfo> info = (*rs)->ServerInfo();
  if (!info.ok()) return Fail(info.status());
  std::printf("shared tier:  %s (redis %s)\nkeys:         %llu\nused memory:  %llu\n"
              "maxmemory:    %llu%s\npolicy:       %s\nevicted keys: %llu\n",
              (*rs)->name().c_str(), info->version.c_str(),
              static_cast<unsigned long long>(info->keys),
              static_cast<unsigned long long>(info->used_memory),
              static_cast<unsigned long long>(info->maxmemory),
              info->maxmemory == 0 ? " (unbounded: set one, docs/deployment.md)" : "",
              info->maxmemory_policy.c_str(), static_cast<unsigned long long>(info->evicted_keys));
  return 0;
}

int RunAction(const std::string& action, const CacheFlags& f) {
  if (action == "stats" && !f.remote.url.empty()) {
    if (int rc = CmdRemoteStats(f.remote); rc != 0 || f.cache_dir.empty()) return rc;
  }
  if (f.cache_dir.empty()) return Fail(Status::InvalidArgument("--cache-dir is required"));
  Result<DomainFilter> filter = MakeFilter(f);
  if (!filter.ok()) return Fail(filter.status());
  bool has_filter = !filter->empty();
  if (action == "gc" && !has_filter && f.keep_domain.empty() && f.max_age_days <= 0 &&
      !f.missing_models) {
    return Fail(Status::InvalidArgument(
        "gc needs --domain, --model, --keep-domain, --max-age-days or --missing-models"));
  }
  if (action == "clear" && !has_filter && !f.all) {
    return Fail(Status::InvalidArgument("clear needs --domain, --model or --all"));
  }
  DiskStore::Options options;
  options.dir = f.cache_dir;
  options.quota_bytes = std::numeric_limits<uint64_t>::max() / 2;  // inspecting never evicts
  Result<std::unique_ptr<DiskStore>> store = DiskStore::Open(options);
  if (!store.ok()) return Fail(store.status());
  DiskStore& s = **store;
  if (action == "ls") return CmdLs(s, *filter);
  if (action == "stats") return CmdStats(s, *filter);
  if (action == "verify") return CmdVerify(s);
  if (action == "gc") {
    std::timespec ts;
    std::timespec_get(&ts, TIME_UTC);
    return CmdGc(s, f, *filter, static_cast<uint64_t>(ts.tv_sec) * 1000);
  }
  return CmdClear(s, *filter);
}

}  // namespace

int CmdCache(int argc, char** argv) {
  std::string action = argc >= 3 ? argv[2] : "";
  bool known = action == "ls" || action == "stats" || action == "verify" || action == "gc" ||
               action == "clear";
  CacheFlags f;
  Flags flags(std::string("cache ") + (known ? action : kActions),
              "inspect and manage a cache directory: ls lists records, stats sums them, verify "
              "reads every record and removes bad ones, gc drops domains or old records, clear "
              "deletes records");
  flags.String("--cache-dir", &f.cache_dir, "the cache directory (required)");
  flags.String("--model", &f.model, "only records made with this model file");
  flags.String("--domain", &f.domain, "only records whose domain root starts with this hex");
  flags.String("--keep-domain", &f.keep_domain, "gc: drop every domain not starting with this hex");
  flags.Int("--max-age-days", &f.max_age_days, "gc: drop records unused for this many days");
  flags.Bool("--all", &f.all, "clear: delete every record");
  flags.Bool("--missing-models", &f.missing_models,
             "gc: drop the records of models whose file is gone or changed");
  f.remote.Declare(flags);  // stats only: what the shared tier holds
  if (!known) {
    if (action == "-h" || action == "--help") {
      std::fputs(flags.Help().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "prefixd cache: expected one of %s, got '%s'\n\n%s", kActions,
                 action.c_str(), flags.Help().c_str());
    return 2;
  }
  // The action's flags start at argv[3].
  return RunWithFlags(flags, argc, argv, [&] {
    if (f.cache_dir.empty() && (action != "stats" || f.remote.url.empty())) {
      std::fprintf(stderr, "--cache-dir is required\n\n%s", flags.Help().c_str());
      return 2;
    }
    return RunAction(action, f);
  }, 3);
}

}  // namespace prefixd::cli
