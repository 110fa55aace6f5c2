#include "engine/prefix_views.h"

#include <algorithm>
#include <map>
#include <utility>

#include "cache/chain_hash.h"

namespace prefixd::engine {
namespace {

void AddTier(const cache::PrefixSummary& s, PrefixTierView* tier, CachedPrefix* row) {
  tier->held = true;
  tier->blocks += s.blocks;
  tier->snapshots += s.snapshots;
  tier->tails += s.tails;
  tier->bytes += s.bytes;
  row->n_tokens = std::max(row->n_tokens, s.n_tokens);
  row->used_unix_ms = std::max(row->used_unix_ms, s.used_unix_ms);
  if (s.created_unix_ms != 0 &&
      (row->created_unix_ms == 0 || s.created_unix_ms < row->created_unix_ms)) {
    row->created_unix_ms = s.created_unix_ms;
  }
}

}  // namespace

std::string ShortId(const Digest& d) { return DigestHex(d, 8); }

std::string PrefixRootId(const Digest& domain, std::span<const Token> tokens, size_t block_size) {
  if (tokens.empty() || block_size == 0) return "";
  if (tokens.size() >= block_size) {
    return ShortId(cache::NextChainHash(domain, tokens.first(block_size)));
  }
  return ShortId(cache::TailKey(domain, tokens));
}

std::vector<CachedPrefix> MergePrefixes(std::span<const cache::PrefixSummary> ram,
                                        std::span<const cache::PrefixSummary> disk,
                                        const Digest* only_domain,
                                        const Companions& companions) {
  std::map<std::pair<Digest, Digest>, CachedPrefix> rows;
  auto add = [&](std::span<const cache::PrefixSummary> tier, PrefixTierView CachedPrefix::*view) {
    for (const cache::PrefixSummary& s : tier) {
      const auto companion = companions.find(s.domain);
      const bool is_companion = companion != companions.end();
      const Digest& owner = is_companion ? companion->second.of : s.domain;
      if (only_domain != nullptr && owner != *only_domain) continue;
      CachedPrefix& row = rows[{s.domain, s.root}];
      row.domain = ShortId(s.domain);
      row.root = ShortId(s.root);
      if (is_companion) {
        row.role = companion->second.role;
        row.of_domain = ShortId(owner);
      }
      AddTier(s, &(row.*view), &row);
    }
  };
  add(ram, &CachedPrefix::ram);
  add(disk, &CachedPrefix::disk);
  std::vector<CachedPrefix> out;
  out.reserve(rows.size());
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  std::stable_sort(out.begin(), out.end(), [](const CachedPrefix& a, const CachedPrefix& b) {
    return a.used_unix_ms > b.used_unix_ms;
  });
  return out;
}

std::optional<cache::PrefixSummary> FindPrefix(std::span<const cache::PrefixSummary> summaries,
                                               const std::string& domain,
                                               const std::string& root) {
  for (const cache::PrefixSummary& s : summaries) {
    if (ShortId(s.domain) == domain && ShortId(s.root) == root) return s;
  }
  return std::nullopt;
}

}  // namespace prefixd::engine
