// RenderMemo: what the capture points remember of earlier prefix renders, so that a continuing
// conversation renders only its new messages instead of every prefix on every request
//.
//
// The capture points need, for each prefix render p of a chat (PrefixesToCompare), the length
// it shares with the full render F, LCP(p, F) in characters. The memo keys a prefix render by
// a PrefixKey — a chain hash over the template, the render options (tools, kwargs…), the date and the prefix's messages —
// and remembers a PrefixRecord: the render's length, the boundary b = LCP(p, F') with the full
// render F' it was last compared to, the character p[b], and the digest of p[0:b]. Since a key
// determines its render, a new full render F gives LCP(p, F) without rendering p in three ways:
//   1. Same boundary: SHA-256(F[0:b]) == digest and (b == length or b == |F| or F[b] != p[b])
//      proves LCP(p, F) == b (ProvesSharedLength).
//   2. Split: a render followed by a placeholder user message also keeps a PrefixSplit, the
//      digest of its head p[0:s] and its short tail p[s:] verbatim (the placeholder's
//      rendering). When SHA-256(F[0:s]) matches, LCP(p, F) = s + LCP(p[s:], F[s:])
//      (SharedLengthBySplit). This is what a new user message needs: the template then renders
//      the turns before it as the placeholder made them render (reasoning stripped), so the
//      boundary moves forward to where the placeholder began.
//   3. Earlier text: the memo also keeps the last few full renders. A kept text T with
//      SHA-256(T[0:b]) == digest spells p[0:b]; when c = LCP(T, F) < b, then
//      LCP(p, F) == c (SharedLengthByText). This is the plain render of turns a template
//      rewrote: the boundary moves back to where the rewrite begins.
// Otherwise p is rendered again and its record replaced.
//
// A wrong record could only move a capture point (reuse lost), never change a prompt; each
// proof above is exact, so the points equal those of rendering every prefix.
//
// Invariants: at most max_entries records of at most max_record_bytes in all (each counted
// with its split's tail), and texts of at most max_text_bytes in all; the least recently found
// or put goes first.
// Thread-safety: every method may be called concurrently (one short lock per call).
// A memo serves one ChatTemplate (the template's fingerprint is part of every key); its kept
// texts need not come from it (a text proves only what its digest matches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/chat_template.h"
#include "util/hash.h"

namespace prefixd::engine {

using PrefixKey = Digest;

// A prefix render p as the digest of its head p[0:at] and its tail p[at:] kept verbatim.
struct PrefixSplit {
  uint64_t at = 0;       // characters in the head
  Digest head_digest{};  // SHA-256 of p[0:at]
  std::string tail;      // p[at:], a few dozen characters
};

// What is remembered of one prefix render. length and split describe the render itself;
// boundary, next_char and head_digest its comparison with the last full render.
struct PrefixRecord {
  bool refused = false;    // the template refused this prefix (the rest is unused)
  uint64_t length = 0;     // characters in the render
  uint64_t boundary = 0;   // LCP with the full render it was last compared to; <= length
  char next_char = 0;      // render[boundary] when boundary < length
  Digest head_digest{};    // SHA-256 of render[0:boundary]
  std::optional<PrefixSplit> split;  // for renders followed by a placeholder user message
  bool skipped = false;    // never rendered: over the render budget of a request that met
                           // many unknown prefixes at once (no boundary; the rest is unused)
};

// The record of a prefix render `prefix` compared with the full render `full` (no split).
PrefixRecord MakePrefixRecord(std::string_view prefix, std::string_view full);

// The most characters a PrefixSplit keeps verbatim.
inline constexpr size_t kMaxSplitTail = 1024;

// Splits `prefix`, a render followed by a placeholder user message, where its longest common
// suffix with `placeholder` begins: the head is then the earlier messages as a later user
// message makes the template render them. `placeholder` is anything that ends with the
// placeholder's rendering: the placeholder user message rendered alone, or the tail of an
// earlier split with the same template, tools and date. Any split is correct; this one is
// useful. nullopt when the common suffix is empty or longer than kMaxSplitTail.
std::optional<PrefixSplit> MakePrefixSplit(std::string_view prefix, std::string_view placeholder);

// The record `r` compared anew: LCP(render, full) == boundary, where `head_digest` is
// SHA-256(full[0:boundary]) and `next_char` the render's character there (ignored when
// boundary == r.length). Keeps what describes the render (length, split).
PrefixRecord Rebound(const PrefixRecord& r, uint64_t boundary, char next_char,
                     const Digest& head_digest);

// The keys of `prefixes` of `chat` rendered by `tmpl`: a chain over the messages seeded with
// the template's fingerprint, RenderOptionsKey(), the render date and the variant. O(size of the
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

// LCP(render, full) when `split` proves it: `head_digest` must be SHA-256(full[0:split.at]) and
// equal split.head_digest; nullopt otherwise. REQUIRES: split.at <= |full|.
std::optional<uint64_t> SharedLengthBySplit(const PrefixSplit& split, std::string_view full,
                                            const Digest& head_digest);

// LCP(render, full) when an earlier text proves it: `text_head_digest` is
// SHA-256(text[0:record.boundary]) and `text_shared` is LCP(text, full). Gives text_shared when
// the digest matches record.head_digest and text_shared < record.boundary (the render spells
// text up to its boundary, and full leaves text before it); nullopt otherwise.
// REQUIRES: !record.refused.
std::optional<uint64_t> SharedLengthByText(const PrefixRecord& record,
                                           const Digest& text_head_digest, uint64_t text_shared);

struct RenderMemoOptions {
  size_t max_entries = size_t(1) << 16;
  size_t max_text_bytes = size_t(16) << 20;  // kept full renders (~256 KB at 64K tokens)
  // The records' memory as heap chunks: ~270 bytes each, and a split's tail (up to
  // kMaxSplitTail characters).
  size_t max_record_bytes = size_t(16) << 20;
};

// A kept full render and the length it shares with the text it was chosen for.
struct ClosestText {
  std::shared_ptr<const std::string> text;  // null when none is kept
  uint64_t shared = 0;                      // LCP(*text, full)
};

class RenderMemo {
 public:
  explicit RenderMemo(const RenderMemoOptions& options = {});
  ~RenderMemo();
  RenderMemo(const RenderMemo&) = delete;
  RenderMemo& operator=(const RenderMemo&) = delete;

  // The records of `keys`, nullopt where none; found ones become most recently used.
  std::vector<std::optional<PrefixRecord>> Find(std::span<const PrefixKey> keys);
  // Inserts or replaces records, evicting the least recently used beyond max_entries or
  // max_record_bytes.
  void Put(std::span<const std::pair<PrefixKey, PrefixRecord>> records);
  size_t size() const;

  // Keeps a full render for SharedLengthByText, evicting the least recently kept or chosen
  // texts beyond max_text_bytes (a text larger than that is not kept), and the kept texts that
  // are prefixes of it (they share no more with any text than it does).
  void PutText(std::string text);
  // The kept text sharing the longest prefix with `full` (ties: the most recent); it becomes
  // the most recently used. Compares outside the lock: O(shared lengths) time.
  ClosestText FindClosestText(std::string_view full);
  size_t n_texts() const;

  void Clear();  // records and texts

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::engine
