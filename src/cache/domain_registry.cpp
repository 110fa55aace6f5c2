#include "cache/domain_registry.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/env.h"

namespace prefixd::cache {

namespace fs = std::filesystem;

bool ParseDigestHex(const std::string& hex, Digest* out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    for (size_t j = 0; j < 2; ++j) {
      char c = hex[2 * i + j];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + unsigned(d);
    }
    (*out)[i] = uint8_t(v);
  }
  return true;
}

Status RememberDomain(const std::string& cache_dir, const DomainInfo& info) {
  const fs::path dir = fs::path(cache_dir) / "domains";
  const fs::path file = dir / DigestHex(info.domain);
  std::error_code ec;
  if (fs::exists(file, ec)) return Status::OK();
  PREFIXD_RETURN_IF_ERROR(Env::Default()->CreateDirs(dir.string()));
  std::string text = "model_fingerprint " + DigestHex(info.model_fingerprint) + "\nlayout " +
                     DigestHex(info.layout_fingerprint) + "\nmodel_path " + info.model_path +
                     "\n";
  return Env::Default()->WriteFileAtomic(
      file.string(), std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()),
                                              text.size()));
}

std::vector<DomainInfo> ListDomains(const std::string& cache_dir) {
  std::vector<DomainInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(cache_dir) / "domains", ec)) {
    DomainInfo info;
    if (!ParseDigestHex(e.path().filename().string(), &info.domain)) continue;
    std::ifstream in(e.path());
    std::string key, value;
    int fields = 0;
    while (in >> key && std::getline(in >> std::ws, value)) {
      if (key == "model_fingerprint") fields += ParseDigestHex(value, &info.model_fingerprint);
      if (key == "layout") fields += ParseDigestHex(value, &info.layout_fingerprint);
      if (key == "model_path") info.model_path = value, ++fields;
    }
    if (fields == 3) out.push_back(std::move(info));
  }
  return out;
}

}  // namespace prefixd::cache
