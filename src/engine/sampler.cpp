#include "engine/sampler.h"

#include <vector>

#include "llama.h"

namespace prefixd::engine {

Sampler::Sampler(const SamplingOptions& o) : greedy_(o.temperature <= 0.0) {
  if (greedy_) return;
  chain_ = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (o.top_k > 0) llama_sampler_chain_add(chain_, llama_sampler_init_top_k(o.top_k));
  if (o.top_p < 1.0) llama_sampler_chain_add(chain_, llama_sampler_init_top_p(float(o.top_p), 1));
  llama_sampler_chain_add(chain_, llama_sampler_init_temp(float(o.temperature)));
  llama_sampler_chain_add(chain_, llama_sampler_init_dist(uint32_t(o.seed)));
}

Sampler::~Sampler() {
  if (chain_ != nullptr) llama_sampler_free(chain_);
}

Token Sampler::Sample(const float* logits, int n_vocab) {
  if (greedy_) {  // lowest id wins ties: deterministic across runs and chunkings
    Token best = 0;
    for (Token t = 1; t < n_vocab; ++t) {
      if (logits[t] > logits[best]) best = t;
    }
    return best;
  }
  std::vector<llama_token_data> data(n_vocab);
  for (Token t = 0; t < n_vocab; ++t) data[t] = {t, logits[t], 0.0f};
  llama_token_data_array arr{data.data(), data.size(), -1, false};
  llama_sampler_apply(chain_, &arr);
  Token chosen = arr.data[arr.selected].id;
  llama_sampler_accept(chain_, chosen);
  return chosen;
}

}  // namespace prefixd::engine
