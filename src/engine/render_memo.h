// RenderMemo: what the capture points remember of earlier prefix renders, so that a continuing
// conversation renders only its new messages instead of every prefix on every request
// (issue 10).
//
// The capture points need, for each prefix render p of a chat (PrefixesToCompare), the length
// it shares with the full render F, LCP(p, F) in characters. A RenderMemo keeps no text. It
// keys a prefix render by a PrefixKey — a chain hash over the template, the tools, the date
// and the prefix's messages — and remembers a PrefixRecord: the render's length, the boundary
// b = LCP(p, F') with the full render F' it was last compared to, the character p[b], and the
// digest of p[0:b]. Since a key determines its render, a new full render F proves
// LCP(p, F) == b without rendering p when
//     SHA-256(F[0:b]) == digest  and  (b == length  or  b == |F|  or  F[b] != p[b]).
// Otherwise p is rendered again and its record replaced.
//
// A wrong record could only move a capture point (reuse lost), never change a prompt; the
// check above makes the points equal those of rendering every prefix.
//
// Invariant: at most max_entries records; the least recently found or put goes first.
// Thread-safety: every method may be called concurrently (one short lock per call).
// A memo serves one ChatTemplate (the template's fingerprint is part of every key).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat_template.h"
#include "util/hash.h"

namespace prefixd::engine {

using PrefixKey = Digest;

// What is remembered of one prefix render.
struct PrefixRecord {
  bool refused = false;    // the template refused this prefix (the rest is unused)
  uint64_t length = 0;     // characters in the render
  uint64_t boundary = 0;   // LCP with the full render it was last compared to; <= length
  char next_char = 0;      // render[boundary] when boundary < length
  Digest head_digest{};    // SHA-256 of render[0:boundary]
};

// The record of a prefix render `prefix` compared with the full render `full`.
PrefixRecord MakePrefixRecord(std::string_view prefix, std::string_view full);

// The keys of `prefixes` of `chat` rendered by `tmpl`: a chain over the messages seeded with
// the template's fingerprint, the tools, the render date and the variant. O(size of the
// messages' JSON) hashing.
std::vector<PrefixKey> PrefixKeys(const ChatTemplate& tmpl, const ParsedChat& chat,
                                  std::span<const PrefixRender> prefixes);

// The digests SHA-256(full[0:b]) for each b in `boundaries` (any order, b <= |full|), in one
// pass over full.
std::vector<Digest> PrefixDigests(std::string_view full, std::span<const uint64_t> boundaries);

// True when `record` proves LCP(prefix, full) == record.boundary; `head_digest` must be
// SHA-256(full[0:record.boundary]). REQUIRES: !record.refused, record.boundary <= |full|.
bool ProvesSharedLength(const PrefixRecord& record, std::string_view full,
                        const Digest& head_digest);

struct RenderMemoOptions {
  size_t max_entries = size_t(1) << 16;  // ~150 bytes each
};

class RenderMemo {
 public:
  explicit RenderMemo(const RenderMemoOptions& options = {});
  ~RenderMemo();
  RenderMemo(const RenderMemo&) = delete;
  RenderMemo& operator=(const RenderMemo&) = delete;

  // The records of `keys`, nullopt where none; found ones become most recently used.
  std::vector<std::optional<PrefixRecord>> Find(std::span<const PrefixKey> keys);
  // Inserts or replaces records, evicting the least recently used beyond max_entries.
  void Put(std::span<const std::pair<PrefixKey, PrefixRecord>> records);
  size_t size() const;
  void Clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::engine
