#include "engine/chunking_memo.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/system_info.h"
#include "util/env.h"

namespace prefixd::engine {

namespace {

std::string Checksum(const std::string& body) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", Crc32cMask(Crc32c(body.data(), body.size())));
  return buf;
}

// Every line of the memo that passes its checksum: key hex -> "0" or "1".
std::map<std::string, std::string> ReadLines(const std::string& path) {
  std::map<std::string, std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find('\t'), b = line.rfind('\t');
    if (a == std::string::npos || b <= a) continue;
    const std::string body = line.substr(0, b);
    const std::string value = line.substr(a + 1, b - a - 1);
    if (Checksum(body) != line.substr(b + 1) || (value != "0" && value != "1")) continue;
    lines[line.substr(0, a)] = value;
  }
  return lines;
}

}  // namespace

Digest ChunkingKey(const Digest& model_digest, const ContextOptions& ctx, int n_gpu_layers,
                   const std::string& devices) {
  Sha256 h;
  h.Update("prefixd-chunking-probe");
  h.Update(DigestHex(model_digest));
  for (uint64_t v : {uint64_t(ctx.n_batch), uint64_t(ctx.n_ubatch), uint64_t(ctx.n_threads),
                     uint64_t(ctx.n_threads_batch), uint64_t(ctx.flash_attn ? 1 : 0),
                     uint64_t(int64_t(n_gpu_layers))}) {
    h.UpdateU64(v);
  }
  h.Update(KvTypeName(ctx.type_k));
  h.Update("|");
  h.Update(KvTypeName(ctx.type_v));
  h.Update("|");
  h.Update(devices);
  h.Update("|");
  const SystemInfo build = GetSystemInfo();
  h.Update(build.ggml_features);
  h.Update("|");
  h.Update(build.llama_patch_set);
  return h.Finish();
}

std::optional<bool> LoadChunkingInvariant(const std::string& path, const Digest& key) {
  const auto lines = ReadLines(path);
  auto it = lines.find(DigestHex(key));
  if (it == lines.end()) return std::nullopt;
  return it->second == "1";
}

Status SaveChunkingInvariant(const std::string& path, const Digest& key, bool invariant) {
  auto lines = ReadLines(path);
  lines[DigestHex(key)] = invariant ? "1" : "0";
  std::ostringstream out;
  for (const auto& [k, v] : lines) {
    const std::string body = k + "\t" + v;
    out << body << '\t' << Checksum(body) << '\n';
  }
  const std::string text = out.str();
  return Env::Default()->WriteFileAtomic(
      path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace prefixd::engine
