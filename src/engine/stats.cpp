#include "engine/stats.h"

namespace prefixd::engine {

void CountRequest(EngineStats& stats, const CompletionResult& r) {
  stats.requests++;
  stats.prompt_tokens += r.usage.prompt_tokens;
  stats.cached_tokens += r.usage.cached_tokens;
  stats.image_tokens_restored += uint64_t(r.usage.image_tokens_restored);
  stats.evaluated_tokens += r.usage.evaluated_tokens;
  stats.generated_tokens += r.usage.completion_tokens;
  stats.draft_tokens += uint64_t(r.usage.draft_tokens);
  stats.draft_accepted += uint64_t(r.usage.draft_accepted);
  stats.draft_steps += uint64_t(r.usage.draft_steps);
  stats.restored_bytes += r.usage.restored_bytes;
  if (r.cache.tier == CacheTier::kSlot) stats.hits_slot++;
  if (r.cache.tier == CacheTier::kRam) stats.hits_ram++;
  if (r.cache.tier == CacheTier::kDisk) stats.hits_disk++;
  if (r.cache.tier == CacheTier::kRemote) stats.hits_remote++;
  if (r.cache.tier == CacheTier::kNone) {
    stats.misses++;
    stats.misses_by_reason[r.cache.miss == CacheMiss::kNotMissed ? CacheMiss::kDisabled
                                                                 : r.cache.miss]++;
  }
}

}  // namespace prefixd::engine
