// prefixd system-info: the machine, for the record (the test command prints it first).
#include <cstdio>

#include "cli/commands.h"
#include "engine/system_info.h"

namespace prefixd::cli {

int CmdSystemInfo(int, char**) {
  const engine::SystemInfo info = engine::GetSystemInfo();
  std::printf("cpu: %s\nggml: %s\nkernel path: %s\nllama.cpp patch set: %s\n",
              info.cpu_model.c_str(), info.ggml_features.c_str(),
              engine::KernelPathName(info.kernel_path), info.llama_patch_set.c_str());
  return 0;
}

}  // namespace prefixd::cli
