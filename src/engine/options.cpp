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

template <class E, size_t N>
const char* NameIn(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

template <class E, size_t N>
std::optional<E> ParseIn(const std::pair<E, const char*> (&table)[N], const std::string& name) {
  for (const auto& [v, n] : table) {
    if (name == n) return v;
  }
  return std::nullopt;
}

}  // namespace

const char* MemoryWarmingName(MemoryWarming warming) { return NameIn(kWarmingNames, warming); }

std::optional<MemoryWarming> ParseMemoryWarming(const std::string& name) {
  return ParseIn(kWarmingNames, name);
}

const char* KvTypeName(KvType type) { return NameIn(kKvTypeNames, type); }

std::optional<KvType> ParseKvType(const std::string& name) { return ParseIn(kKvTypeNames, name); }

bool IsQuantized(KvType type) { return type == KvType::kQ8_0 || type == KvType::kQ4_0; }

}  // namespace prefixd::engine
