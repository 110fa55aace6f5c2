#include "server/cache_json.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;

// What the cache is set to: the same for every tenant, moved by nobody's traffic.
json SettingsJson(const engine::EngineStats& s) {
  return {{"cache", s.cache_on ? engine::StateModeName(s.state_mode) : "off"},
          {"chunking_invariant", s.chunking_invariant},
          {"capture_in_call", s.capture_in_call},
          {"snapshot_spacing", s.snapshot_spacing},
          {"speculation", s.speculation},
          {"speculation_rollback", s.spec_rollback}};
}

json CountersJson(const RequestCounters& c) {
  return {{"requests", c.requests},
          {"prompt_tokens", c.prompt_tokens},
          {"cached_tokens", c.cached_tokens},
          {"evaluated_tokens", c.evaluated_tokens},
          {"generated_tokens", c.generated_tokens},
          {"draft_tokens", c.draft_tokens},
          {"draft_accepted", c.draft_accepted},
          {"hits", {{"slot", c.hits_slot}, {"ram", c.hits_ram}, {"disk", c.hits_disk}}},
          {"restored_bytes", c.restored_bytes},
          {"misses", c.misses},
          {"misses_by_reason", engine::CountsByName(c.misses_by_reason, cache::MissReasonName)}};
}

}  // namespace

json CacheCountersJson(const engine::EngineStats& s) {
  json j = SettingsJson(s);
  j.update(CountersJson(RequestCountersOf(s)));
  j.update({{"draft_prefill_tokens", s.draft_prefill_tokens},
            {"draft_restored_tokens", s.draft_restored_tokens},
            {"bytes_by_tier", engine::CountsByName(s.bytes_by_tier, cache::TierName)},
            {"evictions_by_tier", engine::CountsByName(s.evictions_by_tier, cache::TierName)},
            {"slots_busy", s.slots_busy},
            {"queue_depth", s.queue_depth}});
  if (s.reads_images) {
    j["images"] = {{"read", s.images_prepared},
                   {"encoded", s.images_encoded},
                   {"encoder_hits", {{"ram", s.image_encoder_hits},
                                     {"disk", s.image_encoder_hits_disk},
                                     {"remote", s.image_encoder_hits_remote}}},
                   {"encoder_bytes", s.image_encoder_bytes},
                   {"tokens_restored", s.image_tokens_restored}};
  }
  return j;
}

json TenantCacheCountersJson(const engine::EngineStats& s, const RequestCounters& own) {
  json j = SettingsJson(s);
  j.update(CountersJson(own));
  j["scope"] = "tenant";
  return j;
}

}  // namespace prefixd::server
