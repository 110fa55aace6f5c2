// The engine's views of the cache for the dashboard and the cache browser: the prefix tree a
// Slot's tokens belong to, and the prefix trees of both tiers merged into CachedPrefix rows.
// Pure functions; any thread.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/prefix_inventory.h"
#include "engine/stats.h"

namespace prefixd::engine {

// Ids as CachedPrefix shows them: the first 8 bytes of a digest in hex.
std::string ShortId(const Digest& d);

// The root id of the prefix tree `tokens` would be cached under in `domain`: the first
// Block's ChainHash, or for fewer tokens than a Block the Tail key of all of them. "" for none.
std::string PrefixRootId(const Digest& domain, std::span<const Token> tokens, size_t block_size);

// A companion domain (PrefixRole): whose and of which prompt domain.
struct Companion {
  PrefixRole role = PrefixRole::kPrompt;
  Digest of{};
};
using Companions = std::map<Digest, Companion>;  // by the companion's domain

// One row per (domain, root) found in either tier; only `*only_domain`'s and its companions'
// when not null. A row whose domain is in `companions` is marked with its role and the domain
// it follows. Sorted by last use, newest first.
std::vector<CachedPrefix> MergePrefixes(std::span<const cache::PrefixSummary> ram,
                                        std::span<const cache::PrefixSummary> disk,
                                        const Digest* only_domain,
                                        const Companions& companions = {});

// The summary whose short ids are `domain` and `root`, or nullopt.
std::optional<cache::PrefixSummary> FindPrefix(std::span<const cache::PrefixSummary> summaries,
                                               const std::string& domain,
                                               const std::string& root);

}  // namespace prefixd::engine
