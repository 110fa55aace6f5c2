// Sampler: picks the next token from logits. Greedy by default (temperature <= 0), which makes
// output a pure function of the prompt — what the cache-correctness tests rely on.
// Not thread-safe; one per generating request.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/types.h"

struct llama_sampler;

namespace prefixd::engine {

struct SamplingOptions {
  double temperature = 0.0;  // <= 0: greedy
  double top_p = 1.0;
  int top_k = 0;             // 0: off
  uint64_t seed = 0;
  bool ignore_eos = false;   // never pick an end-of-generation token (llama-server's ignore_eos)
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Picks a token from `n_vocab` logits.
  Token Sample(const float* logits, int n_vocab);

 private:
  llama_sampler* chain_ = nullptr;
  bool greedy_ = true;
};

}  // namespace prefixd::engine
