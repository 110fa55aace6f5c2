// DomainRegistry: remembers, per cache directory, which model and settings each domain root
// was made from, so `prefixd cache --model F` can find a model's records and `gc` can drop
// the domains of models that are gone (a domain root is a hash and cannot be inverted).
//
// One small text file per domain: <cache_dir>/domains/<domain hex>, written once (temp file,
// fsync, rename) with lines "model_fingerprint <hex>", "layout <hex>", "model_path <path>".
// A file that does not parse is ignored (it only costs the --model filter that domain).
// Thread-safety: free functions; concurrent writers of the same domain write the same bytes.
#pragma once

#include <string>
#include <vector>

#include "util/hash.h"
#include "util/status.h"

namespace prefixd::cache {

struct DomainInfo {
  Digest domain{};
  Digest model_fingerprint{};
  Digest layout_fingerprint{};
  std::string model_path;
};

// Writes the descriptor of info.domain unless it exists.
Status RememberDomain(const std::string& cache_dir, const DomainInfo& info);

// Every readable descriptor under cache_dir.
std::vector<DomainInfo> ListDomains(const std::string& cache_dir);

// Parses 64 lower-case hex digits.
bool ParseDigestHex(const std::string& hex, Digest* out);

}  // namespace prefixd::cache
