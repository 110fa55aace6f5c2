// What machine the engine runs on, for the record (the test command prints it, `prefixd
// system-info` too): the CPU's model name, the CPU features ggml's CPU backend was built for,
// and the kernel path they select. Bit-identity claims hold per kernel path where the code
// does not guarantee them otherwise (docs/architecture.md, "Exactness on each CPU").
// Thread-safe.
#pragma once

#include <string>

namespace prefixd::engine {

enum class KernelPath { kAvx512, kAvx2, kAvx, kNeon, kOther };

const char* KernelPathName(KernelPath path);

struct SystemInfo {
  std::string cpu_model;      // /proc/cpuinfo's "model name" (or "unknown")
  std::string ggml_features;  // llama_print_system_info(): "CPU : SSE3 = 1 | AVX2 = 1 | ..."
  KernelPath kernel_path = KernelPath::kOther;
  // The llama.cpp patches the libraries were built with (patches/llama.cpp, digest of the set:
  // scripts/setup-llama.sh's stamp); "unknown" for a build without the stamp.
  std::string llama_patch_set;
};

SystemInfo GetSystemInfo();

}  // namespace prefixd::engine
