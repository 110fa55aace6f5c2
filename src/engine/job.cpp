#include "engine/job.h"

#include <algorithm>
#include <utility>

#include "engine/prefix_views.h"

namespace prefixd::engine {

size_t HeldSequence::Continues(std::span<const Token> prompt, const Digest& prompt_domain) const {
  if (domain != prompt_domain || tokens.empty()) return 0;
  const size_t n = std::min(tokens.size(), prompt.size());
  size_t shared = 0;
  while (shared < n && tokens[shared] == prompt[shared]) ++shared;
  return shared == tokens.size() || shared >= tail ? shared : 0;
}

SlotRun StartRun(std::unique_ptr<Job> job, const Digest& domain, std::unique_ptr<Sampler> sampler,
                 uint64_t epoch) {
  SlotRun run;
  run.job = std::move(job);
  run.domain = domain;
  run.result.usage.queue_ms = MillisSince(run.job->submitted);
  run.result.usage.prefetch_ms = run.job->prefetch_ms;
  run.result.usage.prompt_tokens = int32_t(run.job->request.prompt.tokens.size());
  run.started = Clock::now();
  run.sampler = std::move(sampler);
  run.stream.emplace(run.job->request.stop);
  run.epoch = epoch;
  return run;
}

HeldSequence HeldAfter(const Slot& slot, std::span<const Token> generated) {
  const auto& prompt = slot.run.job->request.prompt.tokens;
  const size_t n = prompt.size();
  const size_t pos = size_t(slot.run.pos);
  HeldSequence held;
  held.tokens.assign(prompt.begin(), prompt.begin() + std::min(pos, n));
  const auto& points = slot.run.job->request.prompt.capture_points;
  held.tail = std::min(points.empty() ? n - 1 : size_t(points.back()), pos);
  if (pos > n) held.tokens.insert(held.tokens.end(), generated.begin(), generated.begin() + (pos - n));
  held.domain = slot.run.domain;
  return held;
}

SlotView ViewOf(const Slot& slot, bool cache_on, uint32_t block_size) {
  SlotView v;
  v.busy = slot.phase != Phase::kIdle;
  std::span<const Token> tokens = slot.held.tokens;
  if (v.busy) tokens = slot.run.job->request.prompt.tokens;
  v.n_tokens = uint32_t(tokens.size());
  // An idle slot's tree is that of its last prompt up to its tail (what the cache published).
  if (!v.busy && slot.held.tail > 0) tokens = tokens.first(std::min(tokens.size(), slot.held.tail));
  const Digest& domain = v.busy ? slot.run.domain : slot.held.domain;
  if (cache_on) {
    v.session = PrefixRootId(domain, tokens, block_size);
    v.domain = ShortId(domain);
  }
  return v;
}

}  // namespace prefixd::engine
