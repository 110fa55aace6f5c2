// PrefixSummary: what a listing of the cache shows of one cached prefix tree, the unit the web
// page's cache browser lists and an admin evicts (PrefixCache::ListPrefixes / EvictPrefix,
// ListStorePrefixes / RemoveStorePrefix below for the disk tier).
//
// A prefix tree is everything a domain holds below one root: the domain's first Block (root =
// its ChainHash h_0) with every Block, Snapshot and Tail that continues it, or a Tail inside the
// first Block (root = its TailKey; a prompt shorter than one Block). Conversations that share
// their first Block (the same system prompt) share a tree.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/types.h"
#include "store/disk_store.h"

namespace prefixd::cache {

struct PrefixSummary {
  Digest domain{};
  ChainHash root{};
  uint64_t n_tokens = 0;   // the deepest position an entry of the tree ends at
  uint64_t blocks = 0;     // Block rows entries (disk: rows records), placeholders included
  uint64_t snapshots = 0;  // Snapshots at Block ends
  uint64_t tails = 0;      // Tails (disk: Tail records and the Snapshots at their ends)
  uint64_t bytes = 0;      // payload bytes (disk: record file bytes)
  uint64_t created_unix_ms = 0;  // the oldest entry's insert; 0 when the tier does not know
  uint64_t used_unix_ms = 0;     // the newest insert or use
};

// The records of `store` grouped by prefix tree, found by following each record's parent up to
// its domain (`block_size`: the cache's, to tell Tails from Block-end Snapshots). O(records);
// reads no file.
std::vector<PrefixSummary> ListStorePrefixes(store::DiskStore& store, size_t block_size);
// Removes every record of the prefix tree `root` of `domain`. Returns the records removed.
size_t RemoveStorePrefix(store::DiskStore& store, const Digest& domain, const ChainHash& root);

}  // namespace prefixd::cache
