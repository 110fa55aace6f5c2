#include "server/cache_json.h"

namespace prefixd::server {

nlohmann::json CacheCountersJson(const engine::EngineStats& s) {
  return {{"cache", s.cache_on ? engine::StateModeName(s.state_mode) : "off"},
          {"chunking_invariant", s.chunking_invariant},
          {"capture_in_call", s.capture_in_call},
          {"snapshot_spacing", s.snapshot_spacing},
          {"requests", s.requests},
          {"prompt_tokens", s.prompt_tokens},
          {"cached_tokens", s.cached_tokens},
          {"evaluated_tokens", s.evaluated_tokens},
          {"generated_tokens", s.generated_tokens},
          {"speculation", s.speculation},
          {"speculation_rollback", s.spec_rollback},
          {"draft_tokens", s.draft_tokens},
          {"draft_accepted", s.draft_accepted},
          {"draft_prefill_tokens", s.draft_prefill_tokens},
          {"draft_restored_tokens", s.draft_restored_tokens},
          {"hits", {{"slot", s.hits_slot}, {"ram", s.hits_ram}, {"disk", s.hits_disk}}},
          {"restored_bytes", s.restored_bytes},
          {"misses", s.misses},
          {"misses_by_reason", engine::CountsByName(s.misses_by_reason, cache::MissReasonName)},
          {"bytes_by_tier", engine::CountsByName(s.bytes_by_tier, cache::TierName)},
          {"evictions_by_tier", engine::CountsByName(s.evictions_by_tier, cache::TierName)},
          {"slots_busy", s.slots_busy},
          {"queue_depth", s.queue_depth}};
}

}  // namespace prefixd::server
