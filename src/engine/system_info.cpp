#include "engine/system_info.h"

#include <fstream>

#include "llama.h"

namespace prefixd::engine {
namespace {

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  for (const char* key : {"model name", "Model", "Hardware"}) {
    in.clear();
    in.seekg(0);
    while (std::getline(in, line)) {
      if (line.rfind(key, 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// From the features line: what ggml's CPU backend was compiled for is what it runs (a
// native build; the features are those of the build machine).
KernelPath PathOf(const std::string& features) {
  auto has = [&](const char* name) {
    return features.find(std::string(" ") + name + " = 1") != std::string::npos;
  };
  if (has("AVX512")) return KernelPath::kAvx512;
  if (has("AVX2")) return KernelPath::kAvx2;
  if (has("AVX")) return KernelPath::kAvx;
  if (has("NEON")) return KernelPath::kNeon;
  return KernelPath::kOther;
}

}  // namespace

const char* KernelPathName(KernelPath path) {
  switch (path) {
    case KernelPath::kAvx512: return "AVX-512";
    case KernelPath::kAvx2: return "AVX2";
    case KernelPath::kAvx: return "AVX";
    case KernelPath::kNeon: return "ARM NEON";
    case KernelPath::kOther: return "other";
  }
  return "other";
}

SystemInfo GetSystemInfo() {
  SystemInfo info;
  info.cpu_model = CpuModel();
  info.ggml_features = llama_print_system_info();
  info.kernel_path = PathOf(info.ggml_features);
  info.llama_patch_set = PREFIXD_LLAMA_PATCH_SET;
  return info;
}

}  // namespace prefixd::engine
