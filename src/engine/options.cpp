#include "engine/options.h"

#include <utility>

namespace prefixd::engine {

namespace {

constexpr std::pair<KvType, const char*> kKvTypeNames[] = {
    {KvType::kF32, "f32"}, {KvType::kF16, "f16"}, {KvType::kBF16, "bf16"},
    {KvType::kQ8_0, "q8_0"}, {KvType::kQ4_0, "q4_0"}};

constexpr std::pair<MemoryWarming, const char*> kWarmingNames[] = {
    {MemoryWarming::kAuto, "auto"}, {MemoryWarming::kIdle, "idle"},
    {MemoryWarming::kThread, "thread"}, {MemoryWarming::kOff, "off"}};

}  // namespace

const char* MemoryWarmingName(MemoryWarming warming) {
  for (const auto& [w, name] : kWarmingNames) {
    if (w == warming) return name;
  }
  return "?";
}

std::optional<MemoryWarming> ParseMemoryWarming(const std::string& name) {
  for (const auto& [w, n] : kWarmingNames) {
    if (name == n) return w;
  }
  return std::nullopt;
}

const char* KvTypeName(KvType type) {
  for (const auto& [t, name] : kKvTypeNames) {
    if (t == type) return name;
  }
  return "?";
}

std::optional<KvType> ParseKvType(const std::string& name) {
  for (const auto& [t, n] : kKvTypeNames) {
    if (name == n) return t;
  }
  return std::nullopt;
}

bool IsQuantized(KvType type) { return type == KvType::kQ8_0 || type == KvType::kQ4_0; }

}  // namespace prefixd::engine
