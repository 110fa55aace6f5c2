// What a GGUF file's header says about its model, read without loading the model: the key-value
// section and the tensor index only, no tensor data and no backend. For callers that describe a
// model before anything loads it (the router's /v1/models). Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace prefixd::engine {

struct GgufHeader {
  std::string arch;         // general.architecture
  int64_t n_ctx_train = 0;  // <arch>.context_length; 0 when the file does not say
};

// Reads `path`'s header. IOError when the file cannot be opened or is not a GGUF; Corruption
// when it has no general.architecture. A split model's first file holds the header.
Result<GgufHeader> ReadGgufHeader(const std::string& path);

}  // namespace prefixd::engine
